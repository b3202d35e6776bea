"""The analysis of a run as compact text, for ``delta-eval analyze`` (``--json`` prints the data itself).

Example::

    a = de.analyze("runs/demo")
    print(analysis_text({"summary": a.summary(), "changes": a.changes(), "themes": a.themes()}, "baseline"))
"""

from __future__ import annotations

from typing import Any

from delta_eval.analysis.themes import section_label

__all__ = ["analysis_text"]


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
