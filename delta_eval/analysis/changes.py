"""Which behaviours changed between the two sides, read from the replays themselves (no LLM).

Per pair, :func:`pair_behaviours` compares the baseline's and the candidate's tool calls (the same, a different
tool, the same tool with a different argument — which one —, a call against a text reply, calls missing or extra)
and notes, per side, whether it acted, asked the user a question back, hit the tool-round cap, and how long its
reply was. :func:`changes` aggregates them: per side, the rate of each behaviour with a Wilson interval; per kind of
difference, the share of pairs with it and the tools and arguments involved most often.

Example::

    con = de.open_run("runs/demo")
    table = pair_behaviours(con)            # one row per pair
    for row in changes(table):              # JSON-ready dicts
        print(row["behaviour"], row["baseline"]["rate"], row["candidate"]["rate"])
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa

from delta_eval.metrics import wilson_interval
from delta_eval.metrics.frames import to_arrow

__all__ = ["DIFFERENCES", "SIDE_BEHAVIOURS", "changes", "compare_calls", "pair_behaviours"]

#: Kinds of difference between the two sides' tool calls, in the order they are reported.
DIFFERENCES = ("different tool", "different arguments", "call vs text reply", "missing calls", "extra calls")

#: Per-side behaviours: column suffix and how a person reads it.
SIDE_BEHAVIOURS = {
    "acts": "makes a tool call",
    "asks": "asks the user a question back",
    "hit_tool_cap": "hits the tool-round cap",
    "text_instead_of_action": "replies with text where the recording acted",
    "matches_recorded": "makes the recorded calls",
    "invalid_calls": "makes an invalid tool call",
    "no_decision": "decides nothing (no tool call, no text)",
}

_PAIRS_SQL = """
SELECT v.pair_id, v.conversation_id, v.stratum, v.stage, v.outcome,
       b.steps AS b_steps, b.final_text AS b_text, b.hit_tool_cap AS b_cap,
       b.text_instead_of_action AS b_tia, b.matches_recorded AS b_match, b.invalid_tool_calls AS b_invalid,
       c.steps AS c_steps, c.final_text AS c_text, c.hit_tool_cap AS c_cap,
       c.text_instead_of_action AS c_tia, c.matches_recorded AS c_match, c.invalid_tool_calls AS c_invalid
FROM verdicts v
JOIN replays b ON b.pair_id = v.pair_id AND b.side = 'baseline'
JOIN replays c ON c.pair_id = v.pair_id AND c.side = 'candidate'
WHERE v.outcome <> 'error'
ORDER BY v.pair_id
"""


def _calls(steps: list[dict[str, Any]] | None) -> list[tuple[str, Any]]:
    out = []
    for step in steps or []:
        for call in step.get("tool_calls") or []:
            try:
                args = json.loads(call["arguments"]) if call["arguments"] else {}
            except ValueError:
                args = call["arguments"]
            out.append((call["name"], args))
    return out


def compare_calls(
    baseline: list[tuple[str, Any]], candidate: list[tuple[str, Any]]
) -> tuple[str | None, str | None, str | None]:
    """How the candidate's calls differ from the baseline's: ``(difference, tool, argument)``, the first difference
    in call order (``None`` when the calls are the same).

    Example:
        >>> compare_calls([("book", {"cabin": "economy"})], [("book", {"cabin": "business"})])
        ('different arguments', 'book', 'cabin')
        >>> compare_calls([("search", {})], [])
        ('call vs text reply', 'search', None)
    """
    if bool(baseline) != bool(candidate):
        return "call vs text reply", (baseline or candidate)[0][0], None
    for (b_name, b_args), (c_name, c_args) in zip(baseline, candidate, strict=False):
        if b_name != c_name:
            return "different tool", c_name, None
        if b_args != c_args:
            if isinstance(b_args, dict) and isinstance(c_args, dict):
                changed = sorted(k for k in set(b_args) | set(c_args) if b_args.get(k) != c_args.get(k))
                return "different arguments", c_name, changed[0]
            return "different arguments", c_name, None
    if len(candidate) < len(baseline):
        return "missing calls", baseline[len(candidate)][0], None
    if len(candidate) > len(baseline):
        return "extra calls", candidate[len(baseline)][0], None
    return None, None, None


def pair_behaviours(con: Any) -> pa.Table:
    """One row per decided pair (errors left out): its stratum, stage and outcome, how the two sides' calls differ
    (``difference``, ``tool``, ``argument``), and per side (``baseline_`` / ``candidate_``) ``acts``, ``asks``,
    ``hit_tool_cap``, ``text_instead_of_action``, ``matches_recorded``, ``invalid_calls``, ``no_decision``,
    ``length`` (characters of the final reply). ``con`` is a connection from :func:`delta_eval.open_run`."""
    rows = to_arrow(con.sql(_PAIRS_SQL)).to_pylist()
    out: dict[str, list[Any]] = {
        name: []
        for name in ("pair_id", "conversation_id", "stratum", "stage", "outcome", "difference", "tool", "argument")
    }
    for side in ("baseline", "candidate"):
        for name in (*SIDE_BEHAVIOURS, "length"):
            out[f"{side}_{name}"] = []
    for r in rows:
        calls = {"baseline": _calls(r["b_steps"]), "candidate": _calls(r["c_steps"])}
        difference, tool, argument = compare_calls(calls["baseline"], calls["candidate"])
        for name in ("pair_id", "conversation_id", "stratum", "stage", "outcome"):
            out[name].append(r[name])
        out["difference"].append(difference)
        out["tool"].append(tool)
        out["argument"].append(argument)
        for side, p in (("baseline", "b"), ("candidate", "c")):
            text = r[f"{p}_text"] or ""
            out[f"{side}_acts"].append(bool(calls[side]))
            out[f"{side}_asks"].append("?" in text and not calls[side])
            out[f"{side}_hit_tool_cap"].append(bool(r[f"{p}_cap"]))
            out[f"{side}_text_instead_of_action"].append(bool(r[f"{p}_tia"]))
            out[f"{side}_matches_recorded"].append(bool(r[f"{p}_match"]))
            out[f"{side}_invalid_calls"].append(bool(r[f"{p}_invalid"]))
            # From the outputs themselves, so runs written before the no_decision column read the same.
            out[f"{side}_no_decision"].append(not calls[side] and not text.strip())
            out[f"{side}_length"].append(len(text))
    return pa.table(out)


def _rate(hits: int, n: int) -> dict[str, float | int]:
    lo, hi = wilson_interval(hits / n if n else 0.0, n)
    return {"n": n, "count": hits, "rate": round(hits / n, 4) if n else 0.0, "lo": round(lo, 4), "hi": round(hi, 4)}


def changes(table: pa.Table, *, by: str | None = None) -> list[dict[str, Any]]:
    """What changed, as JSON-ready rows: first each per-side behaviour (``baseline`` / ``candidate``: count,
    rate, Wilson 95% interval; ``delta``: candidate minus baseline rate), then each kind of call difference
    (``pairs``: share of pairs with it, and the ``tools`` / ``arguments`` most involved), then the mean reply
    length. With ``by="stratum"`` every row also carries its stratum, one set of rows per stratum.

    Example::

        [r for r in changes(table) if r["kind"] == "difference"][0]
        # {'kind': 'difference', 'behaviour': 'different tool', 'pairs': {...}, 'tools': {...}, ...}
    """
    data = table.to_pydict()
    n_all = table.num_rows
    groups: dict[str | None, list[int]] = {None: list(range(n_all))}
    if by is not None:
        groups = {}
        for i, value in enumerate(data[by]):
            groups.setdefault(value, []).append(i)
    out: list[dict[str, Any]] = []
    for group, rows in sorted(groups.items(), key=lambda kv: str(kv[0])):
        extra = {by: group} if by is not None else {}
        n = len(rows)
        for name, label in SIDE_BEHAVIOURS.items():
            b = sum(data[f"baseline_{name}"][i] for i in rows)
            c = sum(data[f"candidate_{name}"][i] for i in rows)
            out.append({"kind": "behaviour", "behaviour": label, "column": name, **extra,
                        "baseline": _rate(b, n), "candidate": _rate(c, n),
                        "delta": round((c - b) / n, 4) if n else 0.0})  # fmt: skip
        for kind in DIFFERENCES:
            hits = [i for i in rows if data["difference"][i] == kind]
            tools = Counter(data["tool"][i] for i in hits if data["tool"][i])
            arguments = Counter(data["argument"][i] for i in hits if data["argument"][i])
            out.append({"kind": "difference", "behaviour": kind, **extra, "pairs": _rate(len(hits), n),
                        "tools": dict(tools.most_common(5)), "arguments": dict(arguments.most_common(5))})  # fmt: skip
        lengths = {s: [data[f"{s}_length"][i] for i in rows] for s in ("baseline", "candidate")}
        out.append({"kind": "length", "behaviour": "mean reply length (characters)", **extra,
                    **{s: round(sum(v) / len(v), 1) if v else 0.0 for s, v in lengths.items()}})  # fmt: skip
    return out
