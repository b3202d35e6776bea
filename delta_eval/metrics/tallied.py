"""An estimand's counted pairs summed per stratum from the verdicts' tallies (see :mod:`delta_eval.store.tallies`):
the sums :func:`~delta_eval.metrics.counted.counted` takes over the verdicts with ``per_conversation=False``, from
about one row per conversation, in Arrow and numpy, with no query engine to start.

A tally counts the verdicts of one batch that share a conversation, a stratum, an outcome, an error's side and a
weight; each sum is then a sum of counts, in integers, so the figures are those of the query over the verdicts to
the last bit (both exact below 2**53). What is counted, and how much each side won, is decided once per distinct
outcome and error side by :func:`~delta_eval.metrics.estimand.contribution`, the rows' own rule.

:func:`tallied` answers ``None`` where tallies cannot give those sums (soft sums, weighted sums of a conversation with
two weights in one stratum, a group they do not hold, a counted verdict without a conversation's key): the caller
reads the verdicts then.

Example:
    >>> import pyarrow as pa
    >>> from delta_eval.store.tallies import tally
    >>> verdicts = pa.table({"conversation_key": [1, 1, 2], "outcome": ["candidate", "tie", "baseline"]})
    >>> c = tallied(tally(verdicts))[""]
    >>> c.pairs, c.counts["candidate"], c.sign_counts()
    (3, 1, (1, 1, 0))
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_eval.metrics.counted import Counted, _counts, _strata_groups, _vary, counted, shared_memo
from delta_eval.metrics.difference import PairedSums
from delta_eval.metrics.estimand import Estimand, contribution
from delta_eval.metrics.key_order import by_key_then

__all__ = ["GROUPS", "tallied", "tallied_or_counted"]

#: The verdict columns a ``by`` may name: those a tally holds as the verdicts do.
GROUPS = ("stratum", "candidate")


def tallied_or_counted(tallies: pa.Table | None, verdicts: str, estimand: Estimand, *, con: Any, by: str | None = None,
                       null: str = "", total: dict[str, Counted] | None = None) -> dict[str, Counted]:  # fmt: skip
    """:func:`tallied` over ``tallies`` where given and they serve, else
    :func:`~delta_eval.metrics.counted.counted` over the verdicts named ``verdicts`` in ``con`` (summed per stratum,
    ``per_conversation=False``): the same figures either way. Within :func:`~delta_eval.metrics.counted.shared_sums`,
    the same tallies summed alike a second time (the summary, then the decision it includes) are read from the first
    call: the tallies do not change meanwhile, as the counted verdicts do not."""
    mine = _shared_tallied(tallies, estimand, by, null, total) if tallies is not None else None
    if mine is not None:
        return mine
    return counted(verdicts, estimand, by=by, null=null, con=con, total=total, per_conversation=False)


def _shared_tallied(tallies: pa.Table, estimand: Estimand, by: str | None, null: str,
                    total: dict[str, Counted] | None) -> dict[str, Counted] | None:  # fmt: skip
    """:func:`tallied`, once per table and arguments within :func:`~delta_eval.metrics.counted.shared_sums` (a new
    dict each call: a caller may change it; the sums in it are read, never changed)."""
    memo = shared_memo()
    if memo is None:
        return tallied(tallies, estimand, by=by, null=null, total=total)
    # The null group's name matters only where the group has nulls (the summary's "None", the decision's "").
    named = null if by in tallies.column_names and tallies.column(by).null_count else ""
    key = ("tallied", id(tallies), estimand.model_dump_json(), by, named, total is not None)
    if key not in memo:
        whole: dict[str, Counted] = {}
        found = tallied(tallies, estimand, by=by, null=null, total=whole if total is not None else None)
        memo[key] = (tallies, found, whole)  # the table kept alive: its id names no other meanwhile
    _, found, whole = memo[key]
    if found is not None and total is not None:
        total.update(whole)
    return None if found is None else dict(found)


def tallied(tallies: pa.Table, estimand: Estimand | None = None, *, by: str | None = None, null: str = "",
            total: dict[str, Counted] | None = None) -> dict[str, Counted] | None:  # fmt: skip
    """The counted pairs of the verdicts ``tallies`` count under ``estimand``, summed per stratum, by the value of
    ``by`` (see :func:`~delta_eval.metrics.counted.counted`, whose ``per_conversation=False`` figures these are);
    ``total`` receives them over every row under ``""``. ``None`` where the tallies cannot give them (see the
    module docstring). Text columns may be dictionary-encoded (as Parquet stores them)."""
    e = estimand or Estimand()
    if e.soft or (by is not None and by not in GROUPS) or not tallies.num_rows:
        return None  # (no tally: the verdicts say what there is, none either or rows no tally counts)
    rows = tallies.num_rows
    n = np.asarray(tallies.column("n").to_numpy(), dtype=np.int64)
    groups, group_names = _codes(tallies.column(by)) if by else (np.zeros(rows, dtype=np.int64), [""])
    # Each distinct outcome and error side decided once: whether it counts, and what each side won.
    (outcome, outcomes), (side, sides) = _codes(tallies.column("outcome")), _codes(tallies.column("error_side"))
    kind = outcome * len(sides) + side
    rules = [contribution({"outcome": o, "error_side": s}, e) for o in outcomes for s in sides]
    # The count of each outcome and of the error pairs lost by each side, per group.
    cells = np.bincount(groups * len(rules) + kind, weights=n, minlength=len(group_names) * len(rules))
    counts_rows = []
    for cell in np.flatnonzero(cells):
        g, k = divmod(int(cell), len(rules))
        o, s = outcomes[k // len(sides)], sides[k % len(sides)]
        lost = s if rules[k] is not None and o == "error" else None
        counts_rows.append((group_names[g], "None" if o is None else o, lost, int(cells[cell])))
    if by and {None, null} <= {g for g, *_ in counts_rows}:
        return None  # the null group named as a real one: summed per conversation, from the verdicts
    counted = np.asarray([ab is not None for ab in rules], dtype=bool)[kind]
    weight = pc.fill_null(tallies.column("weight"), 0.0).to_numpy()[counted]
    weight = np.where(weight == 0, 1.0, weight)
    weighted = e.weighted is True or (e.weighted == "auto" and weight.size > 0 and
                                      _vary(float(weight.max()), float(weight.min())))  # fmt: skip
    keys = tallies.column("conversation_key")
    if keys.null_count and pc.any(pc.and_(pc.is_null(keys), pa.array(counted))).as_py():
        return None  # a verdict without a conversation: its own cluster, named by its pair
    won = np.asarray([ab or (0.0, 0.0) for ab in rules], dtype=np.int64).reshape(-1, 2)[kind[counted]]
    t = n[counted]
    stratum, stratum_names = _codes(tallies.column("stratum"))
    # Each stratum's rank in text order (by UTF-8 bytes, as the verdicts' path orders it; null is ""): a
    # conversation is in the largest it has.
    in_order = sorted({"" if x is None else str(x) for x in stratum_names}, key=lambda x: x.encode("utf-8"))
    place = {name: i for i, name in enumerate(in_order)}
    rank = np.asarray([place["" if x is None else str(x)] for x in stratum_names], dtype=np.int64)
    key = np.asarray(pc.fill_null(keys, 0).to_numpy(), dtype=np.int64)[counted]
    units = np.vstack([t, t * won[:, 0], t * won[:, 1]])
    st = rank[stratum[counted]]
    if weighted:
        named = [null if g is None else g for g in group_names]
        out = _weighted(groups[counted], key, st, units, weight, named, in_order, counts_rows, by, null)
        if out is not None and total is not None:  # over every row: each conversation's rows of every group
            # (a conversation whose stratum is in two groups weighed over both, as the verdicts' path does)
            every = _weighted(np.zeros(len(t), dtype=np.int64), key, st, units, weight, [""], in_order,
                              [("", *rest) for _, *rest in counts_rows], None, "")  # fmt: skip
            if every is None:
                return None  # a conversation of two weights in one stratum, across the groups
            total.update(every)
        return out
    cols = [_per_stratum(groups[counted], key, st, units, group_names, in_order, whole=0)]
    if total is not None:  # over every row: each conversation's rows of every group added up
        cols.append(_per_stratum(np.zeros(len(t), dtype=np.int64), key, st, units, [None], in_order, whole=1))
    out, everything = _strata_groups(pa.concat_tables(cols), counts_rows, by, null, False, total is not None)
    if total is not None:
        total.update(everything)
    return out


def _weighted(groups: np.ndarray, key: np.ndarray, stratum: np.ndarray, units: np.ndarray, weight: np.ndarray,
              group_names: list[str], stratum_names: list[str], counts_rows: list[Any], by: str | None,
              null: str) -> dict[str, Counted] | None:  # fmt: skip
    """The weighted sums per conversation, as :func:`~delta_eval.metrics.counted.counted` takes them over the
    verdicts (``per_conversation=True``): a conversation's counts per weight, each multiplied by its weight once,
    its strata added up in their text order; ``None`` where a conversation has two weights in one stratum (summed
    from the verdicts then)."""
    # Sorted by key, then by group and stratum (one code for the two): each conversation of a group a run, its
    # strata in their order.
    order = by_key_then(key, groups * (int(stratum.max(initial=0)) + 1) + stratum, runs=True)
    g, k, s, w = groups[order], key[order], stratum[order], weight[order]
    starts = _runs(g, k, s)
    if len(_runs(g, k, s, w)) != len(starts):
        return None  # two weights in one conversation's stratum
    n, ua, ub = _run_sums(units, order, starts)
    g, k, s, w = g[starts], k[starts], s[starts], w[starts]
    square = w * w
    cells = {"wa": w * ua, "wt": w * n, "wb": w * ub, "w2a": square * ua, "tt": square * n, "w2b": square * ub,
             "balance": ua - ub, "n": n}  # fmt: skip
    seen = {"a_seen": ua > 0, "a_not": ua < n, "b_seen": ub > 0, "b_not": ub < n}
    # Per conversation: its strata's sums added in their order (as the verdicts' path merges them).
    first = _runs(g, k)
    last = np.append(first[1:], len(g))[: len(first)] - 1  # (none where no pair counts)
    if len(first) == len(g):  # a cell a conversation (one stratum each): nothing to add up
        sums, flags = cells, seen
    else:
        sums = {name: np.add.reduceat(x, first) for name, x in cells.items()}
        flags = {name: np.logical_or.reduceat(x, first) for name, x in seen.items()}
    group, top = g[first], s[last]
    out: dict[str, Counted] = {}
    named = [(null if x is None else x, *rest) for x, *rest in counts_rows]
    for name in sorted({str(x) for x, *_ in named} | ({""} if not by else set())):
        mine = np.flatnonzero(group == group_names.index(name)) if name in group_names else np.array([], int)
        mine = mine[_stable_order(top[mine])]  # by stratum: what the interval groups them by
        counts, losses = _counts(named, name)
        pick = {c: v[mine] for c, v in sums.items()}
        a2, b2 = pick["w2a"], pick["w2b"]
        # Added up in an order of their values, as counted's are.
        aa, tt, bb = (float(np.sort(x).sum()) for x in (a2, pick["tt"], b2))
        iid = np.array([aa, aa, tt, bb, bb, tt, 0.0, aa, bb, tt])
        wt = pick["wt"]
        paired = PairedSums.from_clusters(
            np.asarray(stratum_names, dtype=str)[top[mine]],
            pick["wa"],
            wt,
            pick["wb"],
            wt,
            pairs=int(pick["n"].sum()),
            seen=np.vstack([flags[c][mine] for c in seen]).reshape(4, -1),
            iid=iid,
        )
        out[name] = Counted(paired, None, pick["balance"], counts, losses, True)
    return out


def _run_sums(units: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The sums of each row of ``units`` over each run of the rows taken in ``order`` (runs beginning at ``starts``),
    as doubles: whole numbers below 2**53, exact in any order, added up by ``bincount`` (a fifth of the time of a
    ``reduceat`` over the rows reordered)."""
    if not len(starts):
        return units
    new = np.zeros(len(order), dtype=bool)
    new[starts] = True
    run = np.empty(len(order), dtype=np.intp)
    run[order] = np.cumsum(new) - 1  # each row's run, where the row is
    return np.vstack([np.bincount(run, weights=u, minlength=len(starts)) for u in units])


def _stable_order(codes: np.ndarray) -> np.ndarray:
    """A stable order of small whole numbers (a radix sort where they fit in 16 bits)."""
    small = codes.size and int(codes.min()) >= 0 and int(codes.max()) < 1 << 15
    return np.argsort(codes.astype(np.int16) if small else codes, kind="stable")


def _runs(*columns: np.ndarray) -> np.ndarray:
    """Where each run of equal values (in every column together) of sorted rows starts."""
    size = len(columns[0])
    new = np.zeros(size, dtype=bool)
    new[:1] = True
    for c in columns:
        new[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(new) if size else np.array([], dtype=np.intp)


def _codes(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[Any]]:
    """Each value's code, and the value of each code (null among them where there is one)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.unify_dictionaries().combine_chunks() if pa.types.is_dictionary(column.type) else \
            column.combine_chunks()  # fmt: skip
    encoded = column if pa.types.is_dictionary(column.type) else column.dictionary_encode()
    values = encoded.dictionary.to_pylist()
    indices = encoded.indices
    if indices.null_count:
        indices = pc.fill_null(indices, len(values))
        values.append(None)
    return np.asarray(indices.to_numpy(), dtype=np.int64), values


def _per_stratum(groups: np.ndarray, key: np.ndarray, stratum: np.ndarray, units: np.ndarray, group_names: list[Any],
                 stratum_names: list[str], whole: int) -> pa.Table:  # fmt: skip
    """Per group and stratum, the sums of the query per stratum of :mod:`delta_eval.metrics.counted` (its
    ``_STRATA``), named as it names them: from the counted tallies' group, conversation key, stratum (its rank in
    text order) and units (``t``, ``ua``, ``ub`` a row), each conversation of a group in the largest stratum it has."""
    # Sorted by conversation and group, each (group, conversation) a run of rows: its sums over the run.
    order = by_key_then(key, groups, runs=True)
    g, k = groups[order], key[order]
    starts = _runs(g, k)
    t, ua, ub = _run_sums(units, order, starts)
    st = np.maximum.reduceat(stratum[order], starts) if len(order) else stratum
    cell = g[starts] * len(stratum_names) + st
    size = len(group_names) * len(stratum_names)
    per = {
        "conversations": np.ones_like(t), "t": t, "ua": ua, "ub": ub, "s0": ua > 0, "s1": ua < t, "s2": ub > 0,
        "s3": ub < t, "plus": ua > ub, "minus": ua < ub, "q_aa": ua * ua, "q_at": ua * t, "q_tt": t * t,
        "q_bb": ub * ub, "q_bt": ub * t, "q_ab": ua * ub,
    }  # fmt: skip
    s = {c: np.bincount(cell, weights=v, minlength=size) for c, v in per.items()}
    present = np.flatnonzero(s["conversations"])
    s = {c: v[present] for c, v in s.items()}
    m = s["conversations"].astype(np.int64)
    a, b, tt = s["ua"], s["ub"], s["t"]
    return pa.table({
        "whole": pa.array(np.full(len(present), whole, dtype=np.int32)),
        "grp": pa.array([group_names[c // len(stratum_names)] for c in present], pa.string()),
        "st": pa.array([stratum_names[c % len(stratum_names)] for c in present], pa.string()), "m": m, "n": tt,
        "conversations": m, **{f"s{j}": s[f"s{j}"].astype(np.int64) for j in range(4)},
        "plus": s["plus"].astype(np.int64), "minus": s["minus"].astype(np.int64), "aa": a, "at": a, "tt": tt, "bb": b,
        "bt": b, "ab": np.zeros(len(present)), "units": tt, "a_all": a, "b_all": b, "s_a": a, "s_t": tt, "s_b": b,
        **{q: s[q] for q in ("q_aa", "q_at", "q_tt", "q_bb", "q_bt", "q_ab")},
        "nokey": np.zeros(len(present), dtype=np.int64),
    })  # fmt: skip
