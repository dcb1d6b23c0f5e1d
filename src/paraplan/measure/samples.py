"""Read measured timing samples: the kernel-samples layout, which `paraplan measure` also writes.

Layout (arXiv 2509.22832's released data, `../shared/data/kernel-samples`):
    <root>/[<System>/]operator/<GPU>_<op>_<precision>.csv          e.g. NVIDIAA100-SXM4-80GB_linear1_fp16.csv
    <root>/[<System>/]nccl/<GPU>_<op>_<precision>[_<nodes>_<gpus per node>].csv
`<GPU>` has no underscore; `<op>` may have some (`linear_final`). Operator files hold shape columns and
`F_dur(us)`/`B_dur(us)` (optimizer files: `dur(us)`); collective files hold `shape` (elements),
`nodes`, `GPUsPerNode`, `dur(us)`. `<GPU>.csv` files (the authors' model choice) are not samples.

paraplan's own measurements use the same names and columns, plus a few of its own that the reader
understands wherever they appear: a `gemm` operator (`m,n,k`), and optional `vocab` (padded vocabulary
of `linear_final`/cross-entropy rows), `params` (optimizer rows) and `causal` (flash-attention rows: 1 when timed
with a causal mask; absent or 0, the full square as in the public samples) columns.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CATEGORIES = ("operator", "nccl")
_NAME = re.compile(
    r"^(?P<gpu>[^_]+)_(?P<op>.+?)_(?P<precision>fp16|bf16|fp32|tf32|fp8)(?:_(?P<nodes>\d+)_(?P<gpn>\d+))?$"
)


class SampleError(ValueError):
    """A sample directory or file that cannot be read; the message names the path."""


@dataclass(frozen=True, slots=True)
class SampleFile:
    path: Path
    category: str  # "operator" | "nccl"
    gpu: str
    op: str
    precision: str
    nodes: int | None = None
    gpus_per_node: int | None = None

    @property
    def label(self) -> str:
        """A short stable label: <System>/<category>/<file name> when there is a system folder."""
        parts = self.path.parts
        return "/".join(parts[-3:]) if len(parts) >= 3 else self.path.name


@dataclass(frozen=True, slots=True, eq=False)
class SampleTable:
    file: SampleFile
    columns: tuple[str, ...]
    values: np.ndarray  # float64 [rows, columns]

    def __len__(self) -> int:
        return self.values.shape[0]

    def has(self, column: str) -> bool:
        return column in self.columns

    def column(self, name: str, default: float | None = None) -> np.ndarray:
        if name in self.columns:
            return self.values[:, self.columns.index(name)]
        if default is None:
            raise SampleError(f"{self.file.label}: missing column {name!r}")
        return np.full(len(self), float(default))


def parse_sample_name(path: Path) -> SampleFile | None:
    """A SampleFile for `path`, or None when the name is not `<GPU>_<op>_<precision>[_<n>_<g>].csv`."""
    if path.suffix != ".csv" or path.parent.name not in CATEGORIES:
        return None
    match = _NAME.match(path.stem)
    if match is None:
        return None
    nodes, gpn = match["nodes"], match["gpn"]
    return SampleFile(
        path=path,
        category=path.parent.name,
        gpu=match["gpu"],
        op=match["op"],
        precision=match["precision"],
        nodes=None if nodes is None else int(nodes),
        gpus_per_node=None if gpn is None else int(gpn),
    )


def find_sample_files(root: Path) -> list[SampleFile]:
    """Every sample file under `root` (any depth), sorted by path. Raises SampleError if `root` is missing."""
    if not root.exists():
        raise SampleError(f"samples directory not found: {root}")
    if not root.is_dir():
        raise SampleError(f"not a directory: {root}")
    found = (parse_sample_name(p) for p in sorted(root.rglob("*.csv")))
    return [f for f in found if f is not None]


def gpus_in(files: Iterable[SampleFile]) -> list[str]:
    return sorted({f.gpu for f in files})


def select_gpu(files: list[SampleFile], gpu: str | None) -> tuple[str, list[SampleFile]]:
    """The files of one GPU. `gpu` matches case-insensitively, ignoring spaces, exactly or as a substring."""
    names = gpus_in(files)
    if not names:
        raise SampleError("no sample files found (expected operator/<GPU>_<op>_<precision>.csv or nccl/...)")
    if gpu is None:
        if len(names) > 1:
            raise SampleError(f"samples of several GPUs found ({', '.join(names)}): choose one with --gpu")
        chosen = names[0]
    else:
        wanted = gpu.replace(" ", "").lower()
        exact = [n for n in names if n.lower() == wanted]
        partial = [n for n in names if wanted in n.lower()]
        matches = exact or partial
        if len(matches) != 1:
            what = "no" if not matches else "several"
            raise SampleError(f"{what} GPU matching {gpu!r} among {', '.join(names)}")
        chosen = matches[0]
    return chosen, [f for f in files if f.gpu == chosen]


def read_sample_table(file: SampleFile) -> SampleTable:
    """Read one CSV into floats. Raises SampleError (naming the file) on any problem."""
    try:
        with file.path.open(newline="", encoding="utf-8") as handle:
            rows = [row for row in csv.reader(handle) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SampleError(f"cannot read {file.path}: {exc}") from exc
    if not rows:
        raise SampleError(f"{file.path} is empty")
    header = tuple(c.strip() for c in rows[0])
    body = rows[1:]
    if not body:
        raise SampleError(f"{file.path} has a header but no rows")
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise SampleError(f"{file.path}:{line}: {len(row)} fields, header has {len(header)}")
    try:
        values = np.array(body, dtype=float)
    except ValueError as exc:
        raise SampleError(f"{file.path}: non-numeric value ({exc})") from exc
    return SampleTable(file=file, columns=header, values=values)


def write_sample_table(path: Path, columns: Iterable[str], rows: Iterable[Iterable[float]]) -> None:
    """Write rows in the sample CSV layout (used by `paraplan measure`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(list(columns))
        for row in rows:
            writer.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in row])


def sample_file_name(
    gpu: str, op: str, precision: str, nodes: int | None = None, gpus_per_node: int | None = None
) -> str:
    """`<GPU>_<op>_<precision>[_<nodes>_<gpn>].csv`; `gpu` must not contain an underscore."""
    if "_" in gpu or not gpu:
        raise ValueError(f"GPU name {gpu!r} must be non-empty and without underscores")
    suffix = "" if nodes is None else f"_{nodes}_{gpus_per_node}"
    return f"{gpu}_{op}_{precision}{suffix}.csv"


def busy_reason(metadata: Path) -> str | None:
    """Why `paraplan measure` judged the machine busy while it timed the operators (its `measure.json`,
    `machine_load.busy`), or None: no such file, not busy, or not recorded."""
    try:
        load = json.loads(metadata.read_text()).get("machine_load") or {}
    except (OSError, ValueError, AttributeError):
        return None
    reason = load.get("busy") if isinstance(load, dict) else None
    return str(reason) if reason else None
