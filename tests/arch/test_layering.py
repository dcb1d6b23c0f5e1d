"""The package layering of DESIGN.md section 1a, enforced on the import statements of every module.

- specs and graph never import sim (inputs know nothing of their users);
- nothing outside cli imports cli;
- only measure imports torch;
- no import cycle between modules (module-level and function-level imports both count).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "paraplan"

# A package may not import the packages listed for it.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "specs": (
        "sim",
        "graph",
        "cost",
        "memory",
        "projection",
        "tune",
        "geo",
        "measure",
        "validate",
        "report",
        "cli",
        "formats",
        "hybrid",
    ),
    "graph": ("sim", "projection", "tune", "geo", "measure", "validate", "report", "cli", "formats", "hybrid"),
    "sim": ("cost", "memory", "projection", "tune", "geo", "measure", "validate", "report", "cli", "formats", "hybrid"),
    "cost": ("sim", "projection", "tune", "geo", "measure", "validate", "report", "cli", "hybrid"),
    "memory": ("projection", "tune", "geo", "measure", "validate", "report", "cli", "hybrid"),
    "projection": ("tune", "geo", "measure", "validate", "report", "cli", "hybrid"),
    "formats": ("tune", "geo", "measure", "validate", "report", "cli", "hybrid"),
}
ENTRY_POINTS = {"paraplan.__main__"}
"""`python -m paraplan` runs the CLI."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache  # parsed once for the three tests (every source file: ~1 s each time)
def _imports(path: Path) -> frozenset[str]:
    """Every module named by an import statement of the file, at any depth (resolved relative imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(found)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in SRC.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges[name] = {m for m in _imports(path) if m in modules and m != name}
    return edges


def _package(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == "projection":
        return "projection"
    return parts[1] if len(parts) > 1 else ""


def test_no_upward_imports() -> None:
    problems = []
    for module, targets in sorted(_graph().items()):
        banned = FORBIDDEN.get(_package(module), ())
        problems += [f"{module} imports {t}" for t in sorted(targets) if _package(t) in banned]
        if _package(module) != "cli" and module not in ENTRY_POINTS:
            problems += [f"{module} imports {t}" for t in sorted(targets) if _package(t) == "cli"]
    assert not problems, "\n".join(problems)


def test_only_measure_imports_torch() -> None:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        if _package(module) == "measure":
            continue
        if any(m == "torch" or m.startswith("torch.") for m in _imports(path)):
            problems.append(module)
    assert not problems, "modules outside paraplan.measure import torch: " + ", ".join(problems)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _without_package_inits(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's __init__ re-exporting its modules is not a cycle: drop edges from a module to the
    __init__ of its own package (importing `paraplan.x.y` runs `paraplan.x` first either way)."""
    out = {}
    for module, targets in edges.items():
        out[module] = {t for t in targets if not module.startswith(t + ".")}
    return out


def test_no_import_cycles() -> None:
    cycles = _cycles(_without_package_inits(_graph()))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)
