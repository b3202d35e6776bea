"""How well a run's verdicts agree with people: :func:`calibrate` compares them with human labels.

Labels are a CSV or Parquet file (or a mapping, or rows) of ``pair_id`` and the side a person preferred, in a column
named ``label``, ``preferred`` or ``winner``: ``candidate``, ``baseline`` or ``tie`` (``equivalent`` and ``same``
count as a tie, case does not matter), or ``judge_wrong`` (the verdict is wrong, whichever side is better: always a
disagreement). Without labels, those saved beside the run are read (``RUN_DIR/labels``, written by ``delta-eval
view``; see :mod:`delta_eval.store.labels`): each person's newest label of each pair. A verdict of ``equivalent``
(stage 1 or 2) is a tie too. Pairs whose verdict is an error, or that the run does not have, are left out and
counted; a label that is none of these is reported with its row.

What comes back: the agreement (share of pairs where the verdict matches the label) with its Wilson interval,
Cohen's kappa (agreement beyond what the two marginal distributions give by chance), the confusion table (label by
verdict), and the same per stratum.

Example:
    >>> cal = calibrate("runs/demo", "labels.csv")         # doctest: +SKIP
    >>> print(cal)                                          # doctest: +SKIP
    >>> round(cohen_kappa(["candidate", "tie", "baseline"], ["candidate", "tie", "candidate"]), 3)
    0.5
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from delta_eval.duckdb_connect import connect
from delta_eval.exceptions import ConfigError
from delta_eval.metrics import wilson_interval
from delta_eval.result import RunResult
from delta_eval.store.labels import latest_labels

__all__ = ["CLASSES", "JUDGE_WRONG", "Agreement", "Calibration", "calibrate", "cohen_kappa"]

#: The outcomes compared, in the order the confusion table lists them.
CLASSES = ("candidate", "baseline", "tie")
_ALIASES = {"equivalent": "tie", "same": "tie"}
#: A label that only says the verdict is wrong: a disagreement with any verdict, listed apart in the confusion table.
JUDGE_WRONG = "judge_wrong"
_LABEL_COLUMNS = ("label", "preferred", "winner")


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters' labels of the same items (``None`` when chance agreement is total, e.g. both
    always give the same single label)."""
    if len(a) != len(b):
        raise ValueError(f"two raters must label the same items: {len(a)} vs {len(b)} labels")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


class Agreement(BaseModel):
    """Agreement of verdicts with labels over a set of pairs."""

    model_config = ConfigDict(frozen=True)

    pairs: int
    agreement: float | None
    ci_low: float | None
    ci_high: float | None
    kappa: float | None
    confusion: dict[str, dict[str, int]] = Field(default_factory=dict)

    @classmethod
    def of(cls, labels: Sequence[str], verdicts: Sequence[str]) -> Agreement:
        """The agreement of ``verdicts`` with ``labels`` (same pairs, same order)."""
        n = len(labels)
        rows = (*CLASSES, JUDGE_WRONG) if JUDGE_WRONG in labels else CLASSES
        confusion = {h: {v: 0 for v in CLASSES} for h in rows}
        for h, v in zip(labels, verdicts, strict=True):
            confusion[h][v] += 1
        if n == 0:
            return cls(pairs=0, agreement=None, ci_low=None, ci_high=None, kappa=None, confusion=confusion)
        p = sum(h == v for h, v in zip(labels, verdicts, strict=True)) / n
        lo, hi = wilson_interval(p, n)
        return cls(pairs=n, agreement=p, ci_low=lo, ci_high=hi, kappa=cohen_kappa(labels, verdicts),
                   confusion=confusion)  # fmt: skip


class Calibration(BaseModel):
    """The result of :func:`calibrate`: overall and per-stratum :class:`Agreement`, and what was left out."""

    model_config = ConfigDict(frozen=True)

    run: str
    overall: Agreement
    by_stratum: dict[str, Agreement] = Field(default_factory=dict)
    not_in_run: list[str] = Field(default_factory=list)
    undecided: list[str] = Field(default_factory=list)
    invalid: list[str] = Field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """The calibration as text lines."""
        o = self.overall
        out = [f"calibration of {self.run} against human labels: {o.pairs} labelled pairs compared"]
        out.append(f"  agreement  {_share(o)}")
        out.append(f"  kappa      {_kappa(o.kappa)}   (Cohen; 0 = chance, 1 = perfect)")
        out.append("  confusion  label \\ verdict   " + "".join(f"{c:>10s}" for c in CLASSES))
        for h in o.confusion:
            out.append(f"             {h:18s}" + "".join(f"{o.confusion[h][v]:10d}" for v in CLASSES))
        if len(self.by_stratum) > 1:
            out.append("  by stratum")
            for name, a in self.by_stratum.items():
                out.append(f"    {name or '(none)':45s} n={a.pairs:<5d} {_share(a)}  kappa {_kappa(a.kappa)}")
        for what, items in (("not in the run", self.not_in_run), ("error verdicts, left out", self.undecided),
                            ("unreadable labels", self.invalid)):  # fmt: skip
            if items:
                shown = ", ".join(items[:5]) + (f", ... ({len(items)} in all)" if len(items) > 5 else "")
                out.append(f"  {what}: {shown}")
        return out


def _share(a: Agreement) -> str:
    if a.agreement is None:
        return "n/a"
    return f"{a.agreement:.1%} [{a.ci_low:.1%}, {a.ci_high:.1%}]"


def _kappa(k: float | None) -> str:
    return "n/a" if k is None else f"{k:+.2f}"


def _label_rows(labels: Any) -> tuple[list[tuple[str, Any]], str]:
    """(pair id, label) rows from a file, a mapping or rows, and the source's name for messages."""
    if isinstance(labels, Mapping):
        return [(str(k), v) for k, v in labels.items()], "labels"
    if isinstance(labels, str | Path):
        path = Path(labels)
        if not path.is_file():
            raise ConfigError(f"labels file not found: {path}")
        import duckdb

        reader = "read_parquet(?)" if path.suffix.lower() in (".parquet", ".pq") else "read_csv(?, all_varchar = true)"
        con = connect()
        try:
            rel = con.sql(f"SELECT * FROM {reader}", params=[str(path)])
            columns, rows = rel.columns, rel.fetchall()
        except duckdb.Error as exc:
            raise ConfigError(f"{path}: cannot read the labels: {exc}") from None
        finally:
            con.close()
        return _pick(columns, rows, str(path)), str(path)
    items: list[Any] = list(labels)
    if items and isinstance(items[0], Mapping):
        columns = list(items[0])
        return _pick(columns, [tuple(r.get(c) for c in columns) for r in items], "labels"), "labels"
    return [(str(p), v) for p, v in items], "labels"


def _pick(columns: Sequence[str], rows: Iterable[tuple[Any, ...]], source: str) -> list[tuple[str, Any]]:
    lower = [c.lower() for c in columns]
    if "pair_id" not in lower:
        raise ConfigError(f"{source}: no pair_id column (columns: {', '.join(columns)})")
    label = next((c for c in _LABEL_COLUMNS if c in lower), None)
    if label is None:
        raise ConfigError(f"{source}: no label column; name it one of {', '.join(_LABEL_COLUMNS)}")
    i, j = lower.index("pair_id"), lower.index(label)
    return [(str(r[i]), r[j]) for r in rows]


def _normalise(label: Any) -> str | None:
    if not isinstance(label, str):
        return None
    v = label.strip().lower()
    v = _ALIASES.get(v, v).replace(" ", "_")
    return v if v in CLASSES or v == JUDGE_WRONG else None


def calibrate(
    run: RunResult | str | Path, labels: str | Path | Mapping[str, str] | Iterable[Any] | None = None
) -> Calibration:
    """Compare the verdicts of ``run`` with human ``labels`` (see the module docstring); by default, the labels
    saved beside the run."""
    result = run if isinstance(run, RunResult) else RunResult(run)
    if labels is None:
        saved = latest_labels(result.path)
        rows: list[tuple[str, Any]] = list(zip(saved["pair_id"].to_pylist(), saved["label"].to_pylist(), strict=True))
        source = str(result.path / "labels")
    else:
        rows, source = _label_rows(labels)
    verdicts = {r["pair_id"]: r for r in result.table("verdicts").select(["pair_id", "outcome", "stratum"]).to_pylist()}
    human: list[str] = []
    judged: list[str] = []
    strata: list[str] = []
    not_in_run, undecided, invalid = [], [], []
    for k, (pair_id, raw) in enumerate(rows, start=1):
        label = _normalise(raw)
        if label is None:
            said = ", ".join((*CLASSES, JUDGE_WRONG))
            invalid.append(f"{source}, row {k}, field label: {raw!r} is not one of {said}")
            continue
        verdict = verdicts.get(pair_id)
        if verdict is None:
            not_in_run.append(pair_id)
            continue
        outcome = "tie" if verdict["outcome"] == "equivalent" else verdict["outcome"]
        if outcome not in CLASSES:
            undecided.append(pair_id)
            continue
        human.append(label)
        judged.append(outcome)
        strata.append(verdict["stratum"] or "")
    by_stratum = {}
    for name in sorted(set(strata)):
        idx = [i for i, s in enumerate(strata) if s == name]
        by_stratum[name] = Agreement.of([human[i] for i in idx], [judged[i] for i in idx])
    return Calibration(
        run=str(result.path),
        overall=Agreement.of(human, judged),
        by_stratum=by_stratum,
        not_in_run=not_in_run,
        undecided=undecided,
        invalid=invalid,
    )
