"""Megatron's compact strings for where layers go: `--moe-layer-freq` patterns such as `([0]*3+[1]*58)`
and `--pipeline-model-parallel-layout` strings such as `Ettt|(tttt|)*14,ttmL`."""

from __future__ import annotations

import ast
from typing import Any

from paraplan.formats.common import Problems


# ----------------------------------------------------------------------------- layer patterns
def _eval_pattern(node: ast.AST) -> list[int] | int:
    if isinstance(node, ast.Expression):
        return _eval_pattern(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        items = [_eval_pattern(e) for e in node.elts]
        if not all(isinstance(i, int) for i in items):
            raise ValueError("nested list")
        return items  # type: ignore[return-value]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
        left, right = _eval_pattern(node.left), _eval_pattern(node.right)
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            return left + right
        if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int):
            return left * right
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, list):
            return right * left
    raise ValueError("unsupported expression")


def parse_layer_pattern(raw: Any, num_layers: int | None, where: str, problems: Problems) -> tuple[int, int] | None:
    """`--moe-layer-freq`: an int N (every N-th layer is MoE) or a list expression such as
    `([0]*3+[1]*58)`. Returns (dense prefix, frequency)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return (0, raw) if raw >= 1 else None
    text = str(raw).strip()
    if text.isdigit():
        return 0, int(text)
    try:
        pattern = _eval_pattern(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, RecursionError):
        problems.add(f"{where}: '{text}' is neither an integer nor a list expression like ([0]*3+[1]*58)")
        return None
    if isinstance(pattern, int):
        return 0, pattern
    if any(x not in (0, 1) for x in pattern) or 1 not in pattern:
        problems.add(f"{where}: a layer pattern holds 0 (dense) and 1 (MoE), with at least one 1 (got {text})")
        return None
    if num_layers is not None and len(pattern) != num_layers:
        problems.add(f"{where}: the pattern has {len(pattern)} entries for {num_layers} layers")
        return None
    first = pattern.index(1)
    ones = [i for i, x in enumerate(pattern) if x]
    freq = ones[1] - ones[0] if len(ones) > 1 else len(pattern) - first
    expected = [1 if i >= first and (i - first) % freq == 0 else 0 for i in range(len(pattern))]
    if expected != pattern:
        problems.add(
            f"{where}: pattern {text} is not a dense prefix followed by every n-th layer MoE, which is what "
            "paraplan models (ModelSpec.moe_first_k_dense, moe_layer_freq)"
        )
        return None
    return first, freq


def format_layer_pattern(first_k: int, freq: int, num_layers: int) -> int | str:
    if first_k == 0:
        return freq
    pattern = [1 if i >= first_k and (i - first_k) % freq == 0 else 0 for i in range(num_layers)]
    runs: list[tuple[int, int]] = []
    for x in pattern:
        if runs and runs[-1][0] == x:
            runs[-1] = (x, runs[-1][1] + 1)
        else:
            runs.append((x, 1))
    return "(" + "+".join(f"[{x}]*{n}" for x, n in runs) + ")"


# ----------------------------------------------------------------------------- pipeline layouts
def _expand_layout(text: str, pos: int = 0, depth: int = 0) -> tuple[str, int]:
    out: list[str] = []
    while pos < len(text):
        ch = text[pos]
        if ch == ")":
            if depth == 0:
                raise ValueError("unbalanced ')'")
            return "".join(out), pos + 1
        if ch == "(":
            item, pos = _expand_layout(text, pos + 1, depth + 1)
        elif ch in "EtmL|":
            item, pos = ch, pos + 1
        elif ch in ", ":
            pos += 1
            continue
        else:
            raise ValueError(f"unexpected '{ch}'")
        if pos < len(text) and text[pos] == "*":
            end = pos + 1
            while end < len(text) and text[end].isdigit():
                end += 1
            if end == pos + 1:
                raise ValueError("'*' needs a count")
            item, pos = item * int(text[pos + 1 : end]), end
        out.append(item)
    if depth:
        raise ValueError("unbalanced '('")
    return "".join(out), pos


def parse_pipeline_layout(text: str, where: str, problems: Problems) -> tuple[tuple[int, ...], int] | None:
    """Megatron's `--pipeline-model-parallel-layout` (E embedding, t decoder layer, m MTP, L loss; stages
    split by |; `*N` repeats; commas are cosmetic). Returns (decoder layers per virtual stage, MTP layers)."""
    try:
        expanded, _ = _expand_layout(text)
    except ValueError as exc:
        problems.add(f"{where}: cannot read layout '{text}' ({exc})")
        return None
    stages = expanded.split("|")
    bad = [
        f"'{s}' holds {c}"
        for i, s in enumerate(stages)
        for c in "EL"
        if c in s and i != (0 if c == "E" else len(stages) - 1)
    ]
    if bad or "E" not in stages[0] or "L" not in stages[-1]:
        problems.add(
            f"{where}: paraplan places the embedding (E) on the first and the loss (L) on the last stage; "
            f"layout '{text}' does not" + (f" ({'; '.join(bad)})" if bad else "")
        )
        return None
    return tuple(s.count("t") for s in stages), expanded.count("m")


def format_pipeline_layout(counts: tuple[int, ...], mtp_layers: int) -> str:
    stages = ["t" * n for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "m" * mtp_layers + "L"
    return "|".join(stages)
