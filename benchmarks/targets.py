"""The figures a benchmark measures against a target, as it prints them and as it hands them to ``scale.py``.

A benchmark run with ``--figures PATH`` appends each figure to PATH as a JSON line, so one driver
(``benchmarks/scale.py``) can run them all and print every figure beside its target in one table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Figure", "read_figures", "record", "target"]


@dataclass(frozen=True)
class Figure:
    """One measured figure: ``value`` in ``unit``, against ``bound`` (``None``: shown for context, no target),
    met when at most the bound (at least, with ``at_least``)."""

    benchmark: str
    name: str
    value: float
    unit: str = ""
    bound: float | None = None
    at_least: bool = False
    note: str = ""

    @property
    def met(self) -> bool | None:
        """Whether the target is met (``None`` without one)."""
        if self.bound is None:
            return None
        return self.value >= self.bound if self.at_least else self.value <= self.bound

    def target_text(self) -> str:
        """``<= 1.5 ms``, or ``""`` without a target."""
        if self.bound is None:
            return ""
        return f"{'>=' if self.at_least else '<='} {self.bound:g}{' ' + self.unit if self.unit else ''}"


def target(value: float, bound: float, *, at_least: bool = False) -> str:
    """`` (target <= bound: met)`` or ``...: MISSED``, as a benchmark prints it after a figure."""
    met = value >= bound if at_least else value <= bound
    return f" (target {'>=' if at_least else '<='} {bound:g}: {'met' if met else 'MISSED'})"


def record(path: str | Path | None, *figures: Figure) -> None:
    """Append ``figures`` to ``path`` (a benchmark's ``--figures``), one JSON line each; nothing without a path."""
    if path is None:
        return
    with Path(path).open("a", encoding="utf-8") as f:
        for figure in figures:
            f.write(json.dumps(asdict(figure)) + "\n")


def read_figures(path: str | Path) -> list[Figure]:
    """The figures :func:`record` appended to ``path``, in order."""
    p = Path(path)
    if not p.exists():
        return []
    return [Figure(**json.loads(line)) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
