"""The interval from sums per stratum (StratumSums, what DuckDB adds up over a million verdicts) is the interval
from sums per conversation (PairedSums), to floating-point tolerance: for hard and soft outcomes, weighted or not,
skewed weights and units, strata of one conversation, rows without a conversation, a conversation in two strata."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import Phase, given, seed, settings
from hypothesis import strategies as st

from delta_eval.metrics.counted import counted
from delta_eval.metrics.difference import PairedSums, StratumSums
from delta_eval.metrics.estimand import Estimand
from tests.metrics.test_counted import ESTIMANDS


def _close(x: Any, y: Any, path: str = "") -> None:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            _close(getattr(x, f.name), getattr(y, f.name), f"{path}.{f.name}")
    elif isinstance(x, float) or isinstance(y, float):
        ok = (math.isinf(x) and x == y) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
        assert ok, (path, x, y)
    else:
        assert x == y, (path, x, y)


@st.composite
def pairs(draw: Any) -> dict[str, Any]:
    """Per-pair events and units of a random paired metric: 0/1 or soft events, units of 1 or counts, weights of
    1 or spread over orders of magnitude, conversations (some pairs alone) in strata (some of one conversation)."""
    n = draw(st.integers(1, 80))
    soft, counts, weighted = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    conversations = draw(st.integers(1, 25))
    exclusive = draw(st.booleans())  # a and b never both (wins and losses), or any (failures of two sides)
    a, b, ta, tb, w, cl, sts = [], [], [], [], [], [], []
    for i in range(n):
        t_a = float(draw(st.integers(0, 400))) if counts else 1.0
        t_b = float(draw(st.integers(0, 400))) if counts else 1.0
        if soft:
            x, y = draw(st.floats(0, 1)), draw(st.floats(0, 1))
        else:
            x, y = float(draw(st.booleans())), float(draw(st.booleans()))
        if exclusive and not counts:
            y = 1.0 - x if soft else (0.0 if x else y)
        a.append(x * t_a if counts else x)
        b.append(y * t_b if counts else y)
        ta.append(t_a)
        tb.append(t_b)
        w.append(10.0 ** draw(st.floats(-3, 4)) if weighted else 1.0)
        c = draw(st.integers(-1, conversations - 1))
        cl.append(f"#{i}" if c < 0 else f"c{c}")
        # Strata by conversation, a few of a single one; now and then a conversation's pair in another stratum.
        h = 0 if c < 0 else c % draw(st.sampled_from([1, 3, 7, 30]))
        sts.append(f"s{h}" if draw(st.integers(0, 15)) else "other")
    return {"a": a, "b": b, "ta": ta, "tb": tb, "weights": w, "clusters": cl, "strata": sts}


@seed(30)
@settings(max_examples=300, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(pairs(), st.sampled_from([1.0, 0.37, 4.0]), st.booleans(), st.sampled_from([0.5, 0.95, 0.999]))
def test_the_interval_per_stratum_is_the_interval_per_conversation(
    p: dict[str, Any], scale: float, same_kind: bool, confidence: float
) -> None:
    per_conversation = PairedSums.of(**p)
    per_stratum = per_conversation.moments()
    assert isinstance(per_stratum, StratumSums)
    options = {"scale": scale, "spread": 1.3, "same_kind": same_kind}
    _close(per_stratum.difference(confidence, **options), per_conversation.difference(confidence, **options))


def test_large_counts_lose_nothing_to_the_expansion() -> None:
    # A million pairs in 1,000 conversations of very different sizes, with a rate close to its mean in each: the
    # sums of squares are ~1e9 times the variance they hold, which an expansion in floats would lose.
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 2000, 1000)
    wins = rng.binomial(sizes, 0.4)
    strata = np.array([f"s{k % 4}" for k in range(1000)])
    s = PairedSums.from_clusters(strata, wins.astype(float), sizes.astype(float), np.zeros(1000),
                                 sizes.astype(float), pairs=int(sizes.sum()))  # fmt: skip
    _close(s.moments().difference(), s.difference())


ROWS_SCHEMA = pa.schema([("pair_id", pa.string()), ("outcome", pa.string()), ("preference", pa.float64()),
                         ("weight", pa.float64()), ("conversation_id", pa.string()), ("stratum", pa.string()),
                         ("error", pa.string()), ("error_side", pa.string())])  # fmt: skip


@st.composite
def verdicts(draw: Any) -> pa.Table:
    """Verdict rows of a random run: conversations in strata (one of them in two now and then), ties, errors,
    preferences, weights spread over orders of magnitude or not, rows without a conversation."""
    n = draw(st.integers(0, 70))
    conversations = draw(st.integers(1, 15))
    vary = draw(st.booleans())
    rows = []
    for i in range(n):
        c = draw(st.integers(0, conversations - 1))
        outcome = draw(st.sampled_from(["candidate", "baseline", "tie", "equivalent", "error"]))
        rows.append({
            "pair_id": f"p{i}",
            "outcome": outcome,
            "preference": draw(st.one_of(st.none(), st.floats(0, 1))) if outcome != "error" else None,
            "weight": 10.0 ** draw(st.floats(-2, 3)) if vary else None,
            "conversation_id": draw(st.sampled_from([None, "", f"c{c}", f"c{c}", f"c{c}", f"c{c}"])),
            "stratum": f"s{c % 4}" if draw(st.integers(0, 12)) else draw(st.sampled_from([None, "x"])),
            "error": "baseline replay failed: 500" if outcome == "error" else None,
            "error_side": draw(st.sampled_from(["baseline", "candidate", "judge"])) if outcome == "error" else None,
        })  # fmt: skip
    return pa.Table.from_pylist(rows, schema=ROWS_SCHEMA)


@seed(31)
@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(verdicts(), ESTIMANDS, st.sampled_from([None, "stratum"]))
def test_counted_per_stratum_is_counted_per_conversation(table: pa.Table, e: Estimand, by: str | None) -> None:
    whole: dict[str, Any] = {}
    alone: dict[str, Any] = {}
    per_stratum = counted(table, e, by=by, null="None", per_conversation=False, total=whole)
    per_conversation = counted(table, e, by=by, null="None", total=alone)
    assert per_stratum.keys() == per_conversation.keys()
    for name in [*per_stratum, ""]:
        x, y = (per_stratum[name], per_conversation[name]) if name in per_stratum else (whole[""], alone[""])
        # Per stratum where the sums are exact (hard outcomes, unweighted); per conversation otherwise.
        assert isinstance(x.sums, StratumSums) == (not (x.weighted or e.soft))
        assert (x.counts, x.error_losses, x.weighted, x.pairs, x.none_won, x.sign_counts()) == (
            y.counts, y.error_losses, y.weighted, y.pairs, y.none_won, y.sign_counts())  # fmt: skip
        _close(x.sums.difference(), y.sums.difference())
        _close(x.sums.difference(0.9, scale=3.0), y.sums.difference(0.9, scale=3.0))


def test_a_null_group_named_as_a_real_one_is_one_group() -> None:
    """Rows with a null stratum and rows whose stratum is the null's name (``""`` for the decision, ``"None"`` for
    the win rate by stratum) are one group, counted per stratum as per conversation."""
    outcomes = ["candidate", "baseline", "tie", "candidate", "candidate", "baseline"] * 4
    rows = [{"pair_id": f"p{i}", "outcome": o, "conversation_id": f"c{i % 9}", "stratum": [None, "", "a"][i % 3]}
            for i, o in enumerate(outcomes)]  # fmt: skip
    table = pa.Table.from_pylist(rows)
    per_stratum = counted(table, Estimand(), by="stratum", null="", per_conversation=False)
    per_conversation = counted(table, Estimand(), by="stratum", null="")
    assert per_stratum.keys() == per_conversation.keys() == {"", "a"}
    for name, x in per_stratum.items():
        y = per_conversation[name]
        assert (x.counts, x.pairs, x.sign_counts()) == (y.counts, y.pairs, y.sign_counts())
        _close(x.sums.difference(), y.sums.difference())
    assert per_stratum[""].pairs == 16


def test_weighted_figures_do_not_depend_on_the_rows_order() -> None:
    """A resumed run stores its verdicts in another order than a fresh run of the same config: its weighted win
    rate must be the same to the last bit (each conversation's weight is one, as a sampling weight is)."""
    rng = np.random.default_rng(5)
    conversations = 3000
    weight = 10.0 ** rng.uniform(-1, 2, conversations)
    rows = []
    for i in range(20_000):
        c = int(rng.integers(conversations))
        outcome = str(rng.choice(["candidate", "baseline", "tie", "equivalent"], p=[0.2, 0.2, 0.1, 0.5]))
        rows.append({"pair_id": f"p{i}", "conversation_id": f"c{c}", "stratum": f"s{c % 7}", "weight": weight[c],
                     "outcome": outcome})  # fmt: skip
    table = pa.Table.from_pylist(rows)
    shuffled = table.take(rng.permutation(table.num_rows))
    e = Estimand(weighted=True)
    for by in (None, "stratum"):
        x, y = counted(table, e, by=by, per_conversation=False), counted(shuffled, e, by=by, per_conversation=False)
        for name in x:
            assert x[name].sums.difference() == y[name].sums.difference()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["", "a", "b", "é", "zz"]), st.sampled_from([0.0, 0.4, 1.0, 2.5, 5.0]),
                       st.integers(0, 3), st.integers(0, 3), st.integers(1, 4), st.integers(1, 4)), min_size=1,
             max_size=40),
    st.randoms(use_true_random=False),
)  # fmt: skip
def test_the_design_is_the_same_to_the_bit_in_any_order_with_units_given_once_or_twice(
    rows: list[tuple[str, float, int, int, int, int]], rng: Any
) -> None:
    """Weighted sums (no exact path) of conversations in strata of any names: the interval is the same doubles in
    any order of the conversations, and with the units on both sides one array or two equal ones (the win rate
    gives one; the rows that tie on the rest then tie on both)."""

    def design(rows: list[tuple[str, float, int, int, int, int]], units: str) -> Any:
        w = np.array([r[1] for r in rows])
        t = w * np.array([r[4] for r in rows], dtype=float)
        a, b = w * np.array([r[2] for r in rows], dtype=float), w * np.array([r[3] for r in rows], dtype=float)
        tb = {"one": t, "equal": t.copy(), "other": w * np.array([r[5] for r in rows], dtype=float)}[units]
        strata = np.array([r[0] for r in rows], dtype=str)
        # (The as-if-independent products given, as the callers give them: their sums are not the design's.)
        return PairedSums.from_clusters(strata, a, t, b, tb, pairs=len(rows), iid=np.ones(10)).difference()

    shuffled = list(rows)
    rng.shuffle(shuffled)
    want = design(rows, "one")
    assert design(shuffled, "one") == want
    assert design(shuffled, "equal") == want
    assert design(shuffled, "other") == design(rows, "other")  # b's own units: a key of their own
