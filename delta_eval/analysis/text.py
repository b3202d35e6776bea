"""The analysis of a run, or the comparison of several, as compact text, for ``delta-eval analyze`` and
``delta-eval compare`` (``--json`` prints the data itself).

Example::

    a = de.analyze("runs/demo")
    print(analysis_text({"summary": a.summary(), "changes": a.changes(), "themes": a.themes()}, "baseline"))
    c = de.analyze(["runs/monday", "runs/tuesday"])
    print(comparison_text(c.summary(), c.differences(limit=20)))
"""

from __future__ import annotations

from typing import Any

from delta_eval.analysis.themes import section_label

__all__ = ["analysis_text", "comparison_text"]


def _rate(r: dict[str, Any] | None) -> str:
    if not r:
        return "n/a"
    return f"{r['estimate']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] ({r['pairs']} pairs, {r['conversations']} conv.)"


def analysis_text(data: dict[str, Any], outcome: str = "baseline") -> str:
    """``summary``, ``changes`` and ``themes`` (as :class:`~delta_eval.analysis.analyze.Analysis` returns them)
    in a few dozen lines."""
    s = data["summary"]
    lines = [f"run        {s['run']} ({s['status']})", f"baseline   {s['baseline']}", f"candidate  {s['candidate']}"]
    funnel = ", ".join(f"{k} {v}" for k, v in s["funnel"].items())
    lines += [f"pairs      {s['pairs']}: {funnel}", f"win rate   all {_rate(s['win_rate']['all'])}",
              f"           judged {_rate(s['win_rate']['judged'])}"]  # fmt: skip
    if s.get("decision"):
        lines.append(f"decision   {s['decision']['outcome']} - {s['decision']['decided_by']}")
    for row in s["by_stratum"]:
        lines.append(f"  {row['stratum']:<40} {_rate(row)}")
    for side, v in s["sides"].items():
        cost = f"${v['cost_usd']:.4f}" if v["cost_usd"] is not None else "cost unknown"
        tokens = f"{v['input_tokens']:,} in" if v.get("input_tokens") is not None else "tokens unknown"
        if v.get("cache_read_tokens") is not None and v.get("input_tokens"):
            tokens += f" ({v['cache_read_tokens'] / v['input_tokens']:.0%} cache reads)"
        saved = v.get("saved_by_caching_usd")
        cached = f", saved by caching ${saved:.4f}" if saved else ""
        lines.append(f"{side:<10} {cost}{cached}, {tokens}, latency p50 {v['latency_ms_p50']} ms, "
                     f"p90 {v['latency_ms_p90']} ms")  # fmt: skip
    lines += ["", "what changed (baseline -> candidate, 95% CI)"]
    for row in data["changes"]:
        if row["kind"] == "behaviour":
            b, c = row["baseline"], row["candidate"]
            lines.append(f"  {row['behaviour']:<45} {b['rate']:.3f} -> {c['rate']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]")
        elif row["kind"] == "difference" and row["pairs"]["count"]:
            where = ", ".join(f"{k} {v}" for k, v in list(row["tools"].items())[:3])
            args = ", ".join(f"{k} {v}" for k, v in list(row["arguments"].items())[:3])
            lines.append(f"  calls differ: {row['behaviour']:<30} {row['pairs']['count']} pairs ({where})"
                         + (f"; arguments: {args}" if args else ""))  # fmt: skip
        elif row["kind"] == "length":
            lines.append(f"  {row['behaviour']:<45} {row['baseline']} -> {row['candidate']}")
    who = {"baseline": "the candidate lost", "candidate": "the candidate won", "tie": "tied"}[outcome]
    lines += ["", f"themes where {who}"]
    for t in data["themes"]:
        lines.append(f"  #{t['id']} {t['name']}: {t['size']} pairs ({100 * t['share']:.0f}%)"
                     + (f"; prompt section: {section_label(t)}" if t.get("section") else ""))  # fmt: skip
        if t["examples"]:
            lines.append(f"      e.g. {t['pair_ids'][0]}: {t['examples'][0][:150]}")
    if not data["themes"]:
        lines.append("  none (no stage-3 verdict with this outcome)")
    return "\n".join(lines)


def _money(v: float | None) -> str:
    return "cost unknown" if v is None else f"${v:.4f}"


def comparison_text(summary: dict[str, Any], differences: dict[str, Any]) -> str:
    """A comparison's ``summary`` and a page of its ``differences`` (as
    :class:`~delta_eval.analysis.comparison.Comparison` returns them): per run its decision line, win rate, cost
    and latency per side; the pairs whose outcome differs, one line each with every run's outcome; consistency.

    Example:
        >>> run = {"name": "a", "baseline": "m:b", "candidate": "m:c", "pairs": 4,
        ...        "decision": {"outcome": "APPROVED", "decided_by": "non-inferiority"}, "win_rate": None,
        ...        "sides": {"candidate": {"cost_usd": 0.5, "latency_ms_p50": 9.0, "latency_ms_p90": 12.0}}}
        >>> print(comparison_text({"runs": [run, {**run, "name": "b"}], "pairs": 4, "differing": 1, "consistency": []},
        ...                       {"total": 1, "pairs": 4, "rows": [{"pair_id": "c#1", "outcomes": ["tie", None]}]}))
        2 runs, pairs matched by id (4 in any run)
        [1] a: m:b -> m:c
            DECISION: APPROVED - decided by non-inferiority
            win rate n/a
            candidate $0.5000, latency p50 9.0 ms, p90 12.0 ms
        [2] b: m:b -> m:c
            DECISION: APPROVED - decided by non-inferiority
            win rate n/a
            candidate $0.5000, latency p50 9.0 ms, p90 12.0 ms
        <BLANKLINE>
        pairs whose outcome differs: 1 of 4
          pair  [1]  [2]
          c#1   tie  (absent)
        <BLANKLINE>
        consistency: no two runs share a candidate
    """
    runs = summary["runs"]
    lines = [f"{len(runs)} runs, pairs matched by id ({summary['pairs']} in any run)"]
    for i, r in enumerate(runs, start=1):
        d = r["decision"]
        decision = f"DECISION: {d['outcome']} - decided by {d['decided_by']}" if d["outcome"] else d["decided_by"]
        sides = "; ".join(f"{side} {_money(v['cost_usd'])}, latency p50 {v['latency_ms_p50']} ms, "
                          f"p90 {v['latency_ms_p90']} ms" for side, v in r["sides"].items())  # fmt: skip
        lines += [f"[{i}] {r['name']}: {r['baseline']} -> {r['candidate']}", f"    {decision}",
                  f"    win rate {_rate(r['win_rate'])}", f"    {sides}"]  # fmt: skip
    lines += ["", f"pairs whose outcome differs: {differences['total']} of {differences['pairs']}"]
    rows = [[str(row["pair_id"]), *(o or "(absent)" for o in row["outcomes"])] for row in differences["rows"]]
    if rows:
        table = [["pair", *(f"[{i}]" for i in range(1, len(runs) + 1))], *rows]
        widths = [max(len(row[k]) for row in table) for k in range(len(table[0]))]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
        if differences["total"] > len(rows):
            lines.append(f"  ... {differences['total'] - len(rows)} more (--limit N shows more)")
    lines.append("")
    if not summary["consistency"]:
        lines.append("consistency: no two runs share a candidate")
    for c in summary["consistency"]:
        a, g = c["approved"], c["agreement"]
        agree = (f"outcomes agree on {g['agree']} of {g['shared_pairs']} shared pairs ({g['share']:.1%})"
                 if g["shared_pairs"] else "no pair shared by all of them")  # fmt: skip
        approved = f"approved in {a['count']} of {a['of']} ({a['share']:.0%}, 95% CI [{a['lo']:.0%}, {a['hi']:.0%}])"
        lines.append(f"consistency of {c['candidate']} over {len(c['runs'])} runs ({', '.join(c['runs'])}): "
                     f"{approved}; {agree}")  # fmt: skip
    return "\n".join(lines)
