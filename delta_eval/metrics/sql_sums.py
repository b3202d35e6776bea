"""Per-conversation sums of paired events, computed by DuckDB in one pass for several metrics at once: what
:class:`~delta_eval.metrics.difference.PairedSums` reads, so a gate or a per-side rate over a million rows loads one
row per conversation, never one per pair.

Each metric is written in SQL as :meth:`PairedSums.of` takes it from rows: which rows count (``where``), the events
and units of each side (``a``, ``ta``, ``b``, ``tb``), over the rows' ``weight`` and conversation (``cluster``). The
sums are the ones :meth:`PairedSums.of` adds up, the conversations in its order (by name), so the interval is the
same (a property test holds the decision built on these to the one built on rows).

Example:
    >>> import duckdb, pyarrow as pa
    >>> db = duckdb.connect()
    >>> db.register("t", pa.table({"c": ["x", "x", "y"], "e": [1.0, 0.0, 1.0]}))  # doctest: +ELLIPSIS
    <...>
    >>> s = paired_sums(db, "t", {"m": Metric(a="e")}, cluster="c")[""]["m"]
    >>> s.a.tolist(), s.pairs
    ([1.0, 1.0], 3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_eval.metrics.difference import PRODUCTS, PairedSums
from delta_eval.metrics.frames import fetch_table
from delta_eval.metrics.text_order import text_order
from delta_eval.sql import quote_ident

__all__ = ["Metric", "paired_sums", "squared_by_weight"]


@dataclass(frozen=True)
class Metric:
    """One paired metric in SQL over a source's columns: the rows it counts (``where``) and, for each, the events
    and units of the first (``a``, ``ta``) and second (``b``, ``tb``) side. The defaults make a plain rate of ``a``:
    one unit per row, nothing on the other side."""

    a: str
    ta: str = "1.0"
    b: str = "0.0"
    tb: str = "1.0"
    where: str = "true"
    #: ``a`` and ``b`` are 0 or 1 (with ``ta`` and ``tb`` at 1): the query then needs only their counts.
    binary: bool = False
    #: ``a`` and ``b`` are never both nonzero on a row (a loss of one side or of the other): their products add
    #: up to 0, with no aggregate.
    exclusive: bool = False
    #: ``a``, ``ta``, ``b`` and ``tb`` are whole numbers on every row (counts, flags; as ``binary`` ones are): their
    #: plain sums are exact in any order, so weighted sums are made from them (see :func:`paired_sums`).
    integral: bool = False


def paired_sums(db: Any, source: str, metrics: Mapping[str, Metric], *, cluster: str, weight: str = "1.0",
                group: str | None = None, params: Sequence[Any] = (), extra: Mapping[str, str] | None = None,
                carry: Sequence[str] = (), per_conversation: dict[str, Any] | None = None
                ) -> dict[str, dict[str, PairedSums]]:  # fmt: skip
    """Per value of ``group`` (every row under ``""`` without it), each metric's :class:`PairedSums` over the rows of
    ``source`` (a table, view or parenthesised query in ``db``), conversations named by ``cluster``, pairs weighted
    by ``weight`` (SQL expressions). A group where a metric counts no row gets the empty sums.

    ``extra``: more aggregates over each group's conversation (name: SQL over the source's columns ``carry``),
    computed in the same pass and put in ``per_conversation`` when it is given: one value per group and
    conversation in numpy arrays, sorted by group then conversation, with ``cl`` the conversations (an Arrow array)
    and ``runs`` each group's rows, ``{group: (start, end)}``."""
    names = list(metrics)
    unit = weight.strip() in ("1", "1.0")  # no weight: the sums need no multiplication by it
    # Weighted, with whole-number values: each conversation's plain sums per weight (exact in any order of its rows),
    # each multiplied by its weight in numpy and added up in the order of the weights: the same doubles in any order
    # of the rows, which a compensated sum per conversation of the weighted values (fsum, below) comes close to
    # without promising, and a cheaper query (1M pairs: the replay gates' 0.58 -> 0.56 s).
    by_weight = (
        not unit
        and not extra
        and all(m.binary or m.integral or m.where.strip().lower() == "false" for m in metrics.values())
    )
    # A null group is the group "None", as the rows path names it (str): one group of both, not two of one name.
    named = f"coalesce(({group})::VARCHAR, 'None')" if group else "''"
    cols = [f"({cluster})::VARCHAR AS cl", f"{named} AS grp"]
    if not unit:
        cols.append(f"({weight})::DOUBLE AS w")
    cols += [quote_ident(c) for c in carry]
    aggs: dict[str, str] = {}  # aggregate -> its name; metrics share the ones they have in common

    def agg(expr: str) -> str:
        return aggs.setdefault(expr, f"g{len(aggs)}")

    # What each weighted figure is made of by weight (by_weight): its name -> (the plain sum's, the weight's power).
    powers: dict[str, tuple[str, int]] = {}

    def weighed(term: str, power: int) -> str:
        if by_weight:
            plain = agg(f"sum({term})")
            powers[f"{plain}w{power}"] = (plain, power)
            return f"{plain}w{power}"
        # Weighted: fsum (compensated), as a conversation's rows come in any order and a plain sum of weights
        # differs in its last bits with it (a decision taken twice on the same run differed).
        return agg(f"sum({term})" if unit else f"fsum({' * '.join(['w'] * power)} * {term})")

    # Per metric, where each figure comes from: an aggregate's name, "" for 0, or (">0", n) / ("gap", n, m) for
    # the conversations where n > 0 / n - m > 0 (events seen, from counts the query already has).
    found: list[dict[str, Any]] = []
    # Metrics over the same rows, or with the same values on them, share their columns (and so their aggregates:
    # each costs about as much as grouping the rows, so the fewer the better).
    rows_of: dict[str, str] = {}
    values: dict[tuple[str, str], str] = {}
    for name in names:
        m = metrics[name]
        if m.where.strip().lower() == "false":
            found.append({})  # counts no row: its sums are empty, no aggregate needed
            continue
        inn = rows_of.get(m.where.strip())
        if inn is None:
            inn = rows_of[m.where.strip()] = f"in{len(rows_of)}"
            cols += [f"coalesce(({m.where})::BOOLEAN, false) AS {inn}"]
        one = f"{inn}::DOUBLE"
        # Each value is 0 on the rows the metric does not count, so plain sums (no FILTER) add up its rows alone.
        factor: dict[str, str | None] = {}
        for x in ("a", "ta", "b", "tb"):
            raw = getattr(m, x).strip()
            if x == "tb" and raw == m.ta.strip():
                factor[x] = factor["ta"]  # the same units on both sides: one column, and the products shared
            elif raw in ("0", "0.0"):
                factor[x] = None
            elif raw in ("1", "1.0"):
                factor[x] = one
            else:
                if (inn, raw) not in values:
                    values[inn, raw] = f"v{len(values)}"
                    cols += [f"CASE WHEN {inn} THEN coalesce(({raw})::DOUBLE, 0.0) ELSE 0.0 END AS {values[inn, raw]}"]
                factor[x] = values[inn, raw]
        # Counts as DOUBLE sums: exact below 2**53, and a sum of integers is a HUGEINT, several times slower.
        # Every row counts: its count is the group's (one aggregate for every such metric, and the cheapest).
        mine: dict[str, Any] = {"n": agg("count(*)::DOUBLE" if m.where.strip() == "true" else f"sum({one})")}
        fa, fb = factor["a"], factor["b"]
        if m.binary and factor["ta"] == factor["tb"] == one and fa:
            # 0/1 events, one unit per row: every product is one of a few sums, and whether an event (or a
            # non-event) occurred in a conversation follows from its counts.
            ua = agg(f"sum({fa})")
            ub = agg(f"sum({fb})") if fb else ""
            t = mine["n"] if unit else weighed(one, 1)
            aa, tt = (ua, mine["n"]) if unit else (weighed(fa, 2), weighed(one, 2))
            bb = (ub if unit else weighed(fb, 2)) if fb else ""
            ab = weighed(f"{fa} * {fb}", 2) if fb and not m.exclusive else ""
            mine.update(a=ua if unit else weighed(fa, 1), ta=t, b=(ub if unit else weighed(fb, 1)) if fb else "",
                        tb=t, seen0=(">0", ua), seen1=("gap", mine["n"], ua), seen2=(">0", ub) if fb else "",
                        seen3=("gap", mine["n"], ub) if fb else ("gap", mine["n"], ""))  # fmt: skip
            for k, p in enumerate((aa, aa, tt, bb, bb, tt, ab, aa, bb, tt)):
                mine[f"p{k}"] = p
            found.append(mine)
            continue
        for x in ("a", "ta", "b", "tb"):
            f = factor[x]
            mine[x] = weighed(f, 1) if f else ""
        # Whether each rate's event and non-event occurred in the conversation (unweighted, as PairedSums.of); never,
        # for a side with no events or no units (no aggregate).
        for k, (x, t) in enumerate((("a", "ta"), ("b", "tb"))):
            ex, et = factor[x], factor[t]
            mine[f"seen{2 * k}"] = agg(f"bool_or({ex} > 0)") if ex else ""
            mine[f"seen{2 * k + 1}"] = agg(f"bool_or({et} - {ex} > 0)" if ex else f"bool_or({et} > 0)") if et else ""
        for k, (x, y) in enumerate(PRODUCTS):
            fx, fy = factor[x], factor[y]
            if fx is None or fy is None or (m.exclusive and {x, y} == {"a", "b"}):
                mine[f"p{k}"] = ""
            else:
                # An indicator times another value of the same metric is that value (both are 0 off its rows).
                both = sorted({fx, fy}, key=lambda f: f.endswith("::DOUBLE"))
                if len(both) == 1:
                    term = fx if fx.endswith("::DOUBLE") else f"{fx} * {fx}"
                else:
                    term = both[0] if both[1].endswith("::DOUBLE") else f"{both[0]} * {both[1]}"
                mine[f"p{k}"] = weighed(term, 2)
        found.append(mine)
    if not aggs and not extra:
        agg("count(*)::DOUBLE")  # every metric counts no row: the query still names each group's conversations
    listed = ", ".join([f"{expr} AS {alias}" for expr, alias in aggs.items()] +
                       [f"{expr} AS x_{name}" for name, expr in (extra or {}).items()])  # fmt: skip
    keys = "grp, cl, w" if by_weight else "grp, cl"
    sql = f"WITH rows AS (SELECT {', '.join(cols)} FROM {source}) SELECT {keys}, {listed} FROM rows GROUP BY {keys}"
    got = fetch_table(db, sql, params)
    # The conversations in PairedSums.of's order (its one stratum, then by name: by their UTF-8 bytes, which is
    # Python's order of code points). Without groups the names alone are sorted; each column is then put in that
    # order as a numpy array (no copy of the text).
    per_weight: dict[str, dict[str, float]] = {}
    if by_weight:
        # The products (the square of the weight) only summed over the rows; each conversation's figures of the
        # weight itself (power 1) merged per conversation.
        per_weight = _squared_by_weight(got, {name: plain for name, (plain, p) in powers.items() if p == 2})
        once = {name: made for name, made in powers.items() if made[1] == 1}
        got = _by_conversation(got, once, group is not None)  # (in that order)
        order = np.arange(got.num_rows)
    else:
        order = text_order([got.column("grp"), got.column("cl")] if group else [got.column("cl")])
    data = {k: np.asarray(got.column(k).to_numpy(zero_copy_only=False))[order] for k in got.column_names
            if k not in ("grp", "cl")}  # fmt: skip
    grp = pc.take(got.column("grp"), order) if group else None
    bounds = dict.fromkeys([""], (0, got.num_rows)) if grp is None else _runs(grp)
    if per_conversation is not None:
        per_conversation.update(runs=bounds, cl=pc.take(got.column("cl"), order),
                                **{name: data[f"x_{name}"] for name in extra or {}})  # fmt: skip
    out: dict[str, dict[str, PairedSums]] = {}
    for g in sorted(set(bounds) | ({""} if group is None else set())):
        lo, hi = bounds.get(g, (0, 0))
        out[g] = {}
        for i, name in enumerate(names):
            alias = found[i]
            keep = np.flatnonzero(data[alias["n"]][lo:hi] > 0) + lo if alias else np.zeros(0, dtype=np.int64)
            size = len(keep)

            def pick(key: str, keep: np.ndarray = keep, alias: dict[str, Any] = alias, size: int = size) -> np.ndarray:
                spec = alias.get(key, "")
                if isinstance(spec, tuple):
                    n = data[spec[1]][keep].astype(float)
                    m = data[spec[2]][keep].astype(float) if len(spec) > 2 and spec[2] else np.zeros(size)
                    seen: np.ndarray = n > 0 if spec[0] == ">0" else n - m > 0
                    return seen
                picked: np.ndarray = data[spec][keep] if spec else np.zeros(size)
                return picked

            seen = np.vstack([pick(f"seen{k}").astype(bool) for k in range(4)]).reshape(4, -1)
            if by_weight:  # (a conversation where the metric counts no row adds 0 to each)
                iid = np.array([per_weight.get(g, {}).get(alias.get(f"p{k}", ""), 0.0) for k in range(len(PRODUCTS))])
            else:
                iid = np.array([float(pick(f"p{k}").astype(float).sum()) for k in range(len(PRODUCTS))])
            a, ta, b, tb = (pick(x).astype(float) for x in ("a", "ta", "b", "tb"))
            strata = np.full(size, "", dtype=str)
            out[g][name] = PairedSums.from_clusters(strata, a, ta, b, tb, pairs=int(pick("n").sum()), seen=seen,
                                                    iid=iid)  # fmt: skip
    return out


def _squared_by_weight(got: pa.Table, plain: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Per group (``grp``), each weighted figure of ``plain`` (name: its plain sum's column, whose total weighted by
    the square of each row's weight ``w`` it is) summed over the group's rows as :func:`squared_by_weight` sums
    them: the same doubles as a sum of each conversation's, in any order of the rows and whatever path made them."""
    # (A null weight adds nothing, as in _by_conversation.)
    w = np.asarray(pc.fill_null(got.column("w"), 0.0).to_numpy(zero_copy_only=False), dtype=float)
    columns = [np.asarray(got.column(c).to_numpy(zero_copy_only=False), dtype=float) for c in plain.values()]
    grp = got.column("grp").combine_chunks() if got.num_rows else pa.array([], pa.string())
    out: dict[str, dict[str, float]] = {}
    for g in pc.unique(grp).to_pylist():  # (never null: the query names a null group "None")
        rows = np.flatnonzero(pc.equal(grp, g).to_numpy(zero_copy_only=False))
        out[str(g)] = dict(zip(plain, squared_by_weight(w[rows], *(c[rows] for c in columns)), strict=True))
    return out


def squared_by_weight(w: np.ndarray, *totals: np.ndarray) -> list[float]:
    """Per array of ``totals`` (whole numbers, one per row: a conversation's, or a conversation's rows of one
    weight), its sum weighted by the square of each row's weight ``w``: the totals of each weight added up (exact),
    each times its weight squared, those added up exactly rounded (``math.fsum``). The same doubles in any order of
    the rows, with rows of zeros or not, and ten times cheaper than ``fsum`` over every row (140,000 conversations).

    Example:
        >>> squared_by_weight(np.array([0.5, 2.0, 0.5]), np.array([1.0, 3.0, 2.0]))
        [12.75]
    """
    if not len(w):
        return [0.0 for _ in totals]
    weights, which = np.unique(w, return_inverse=True)
    squares = weights * weights
    return [math.fsum((np.bincount(which, weights=t, minlength=len(weights)) * squares).tolist()) for t in totals]


def _by_conversation(got: pa.Table, powers: Mapping[str, tuple[str, int]], grouped: bool) -> pa.Table:
    """The rows of ``got`` (per group, conversation and weight ``w``: plain sums of whole numbers, counts, flags)
    merged into one per group and conversation: each plain sum, flag (any) and count added up, and each weighted
    figure of ``powers`` (name: its plain sum's column and the weight's power) the sum over the conversation's
    weights, in their order, of the plain sum times the weight to that power: the same doubles whatever the order of
    the rows was. The rows come out in the order of their group, then conversation (as :func:`text_order` sorts
    them)."""
    # (A null weight adds nothing, as fsum skips the null products it makes.)
    w = pc.fill_null(got.column("w"), 0.0).to_numpy(zero_copy_only=False)
    by_w = np.argsort(w, kind="stable")  # (NaN weights last)
    keys = [got.column("grp").take(by_w), got.column("cl").take(by_w)] if grouped else [got.column("cl").take(by_w)]
    order = by_w[text_order(keys)]  # (stable: a conversation's rows by weight)
    n = len(order)
    taken = pa.array(order)
    new = _changes(got.column("cl").combine_chunks().take(taken))  # where a (group, conversation) begins
    if grouped:
        new |= _changes(got.column("grp").combine_chunks().take(taken))
    starts = np.flatnonzero(new)
    first = pa.array(order[starts])
    out: dict[str, Any] = {"grp": got.column("grp").take(first), "cl": got.column("cl").take(first)}
    weights = w[order]
    squares = weights * weights
    for name in got.column_names:
        if name in ("grp", "cl", "w"):
            continue
        values = np.asarray(got.column(name).to_numpy(zero_copy_only=False))[order]
        reduce = np.logical_or if values.dtype == bool else np.add
        out[name] = reduce.reduceat(values, starts) if n else values
    for name, (plain, power) in powers.items():
        values = np.asarray(got.column(plain).to_numpy(zero_copy_only=False), dtype=float)[order]
        values = values * (weights if power == 1 else squares)
        out[name] = np.add.reduceat(values, starts) if n else values
    return pa.table(out)


def _changes(flat: pa.Array) -> np.ndarray:
    """Where each row's value differs from the row before (the first row too): a run of equal values begins. A
    change of value, or between null and a value (a comparison with null is null: a change unless both are)."""
    new = np.ones(len(flat), dtype=bool)
    if len(flat) > 1:
        same = pc.fill_null(pc.equal(flat[1:], flat[:-1]), False)
        both_null = pc.and_(pc.is_null(flat[1:]), pc.is_null(flat[:-1]))
        new[1:] = ~pc.or_(same, both_null).to_numpy(zero_copy_only=False)
    return new


def _runs(values: pa.ChunkedArray) -> dict[str, tuple[int, int]]:
    """The runs of equal values of a sorted array of text, each as its (start, end); a null names the run "None",
    as ``str`` names it."""
    n = len(values)
    if not n:
        return {}
    flat = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    starts = np.flatnonzero(_changes(flat))
    ends = np.r_[starts[1:], n]
    names = flat.take(pa.array(starts)).to_pylist()
    return {str(v): (int(s), int(e)) for v, s, e in zip(names, starts, ends, strict=True)}
