"""The report of a run as one self-contained HTML page (no script, no network: inline CSS and SVG), for
``delta-eval report RUN_DIR --html``: the decision and the pairs behind each of its gates, win rates overall and per
stratum with their intervals drawn, the funnel, cost and latency per side, what changed, and the themes with every
pair (collapsed: the user message, both sides with what only one of them said marked, the recorded turn), under a
table of contents; long outputs wrap inside the page rather than widen it. In a session run a pair is a whole
session: the baseline's and the candidate's transcripts side by side, each user message marked simulated or
recorded and each tool result with its source (:func:`session_html`). The pairs behind a gate are those the
viewer's link from that gate lists (the same filter, :mod:`delta_eval.analysis.evidence`).

Example::

    path = write_html(de.analyze("runs/demo"))     # runs/demo/report.html
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from delta_eval.analysis.analyze import Analysis
from delta_eval.analysis.diff import Segment, word_diff
from delta_eval.analysis.evidence import decision_view
from delta_eval.analysis.report import SIMULATOR_PARTS, render_report
from delta_eval.analysis.themes import section_label
from delta_eval.analysis.transcripts import SOURCE_LABELS, USER_LABELS
from delta_eval.store import safe_paths

__all__ = ["pair_html", "render_html", "session_html", "write_html"]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;display:block;max-width:100%;overflow-x:auto}
td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;overflow-wrap:anywhere}
td.n{text-align:right;font-variant-numeric:tabular-nums;overflow-wrap:normal}.muted{color:#777}
.APPROVED{color:#17803d}.REJECTED{color:#b42318}.PARTIAL{color:#b54708}
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;max-width:100%}
.side{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:8px}.side pre{margin:0}
details{margin:.3em 0}summary{cursor:pointer;overflow-wrap:anywhere}nav ol{columns:2}
ins{background:#d9f2df;text-decoration:none}del{background:#fbe0dd;text-decoration:none}
.pass{color:#17803d}.fail{color:#b42318}.user{background:#eef3fb}
.side2{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:8px}.transcript pre{margin:.2em 0}
.call{border-left:3px solid #3b6fb6;padding-left:.4em;margin:.3em 0}
.said{border-left:3px solid #17803d;padding-left:.4em}.said-simulated{border-color:#b54708}
.src{font-size:11px;padding:0 4px;border-radius:3px;background:#e6f0e6}
.src-llm,.src-simulated,.src-custom{background:#fdf0d5;color:#8a5300}
"""


def _bar(lo: float, est: float, hi: float, width: int = 240) -> str:
    """An interval on [0, 1] as inline SVG: the 0.5 line, the interval, the estimate."""
    x = [round(width * v, 1) for v in (lo, est, hi)]
    half = width / 2
    return (
        f'<svg width="{width}" height="14" role="img" aria-label="{est:.3f} [{lo:.3f}, {hi:.3f}]">'
        f'<line x1="{half}" y1="0" x2="{half}" y2="14" stroke="#bbb"/>'
        f'<line x1="{x[0]}" y1="7" x2="{x[2]}" y2="7" stroke="#3b6fb6" stroke-width="3"/>'
        f'<circle cx="{x[1]}" cy="7" r="4" fill="#1d3f72"/></svg>'
    )


def _rate_row(label: str, r: dict[str, Any] | None) -> str:
    if not r:
        return f"<tr><td>{escape(label)}</td><td colspan=4 class=muted>none</td></tr>"
    return (
        f"<tr><td>{escape(label)}</td><td class=n>{r['estimate']:.3f}</td>"
        f"<td class=n>[{r['lo']:.3f}, {r['hi']:.3f}]</td><td class=n>{r['pairs']:,}</td>"
        f"<td>{_bar(r['lo'], r['estimate'], r['hi'])}</td></tr>"
    )


def _side_text(side: dict[str, Any] | None) -> str:
    """A side's turn as plain text: its calls, its reply, its error."""
    if not side:
        return "(none)"
    lines = [f"[calls] {c}" for c in side.get("calls") or []]
    if side.get("text"):
        lines.append(str(side["text"]))
    if side.get("error"):
        lines.append(f"[error] {side['error']}")
    return "\n".join(lines) or "(no reply)"


def _marked(segments: list[Segment]) -> str:
    """Diff segments as escaped HTML, what only this side has marked."""
    tag = {"ins": "ins", "del": "del"}
    return "".join(
        f"<{tag[s.kind]}>{escape(s.text)}</{tag[s.kind]}>" if s.kind in tag else escape(s.text) for s in segments
    )


#: What a pair needs of the page's style, for a pair shown alone (a notebook cell).
_PAIR_CSS = (
    ".side{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:8px}.side pre{margin:0;white-space:pre-wrap;"
    "overflow-wrap:anywhere;font-size:12px}ins{background:#d9f2df;text-decoration:none}"
    "del{background:#fbe0dd;text-decoration:none}.user{background:#eef3fb;white-space:pre-wrap}.muted{color:#777}"
)


def pair_html(p: dict[str, Any], *, open: bool = False, styled: bool = False) -> str:
    """One pair of :meth:`Analysis.pairs <delta_eval.analysis.analyze.Analysis.pairs>` as HTML, collapsed (``open``:
    expanded): the judge's summary as its title; inside, the user message, then the baseline and the candidate with
    the words only one of them has marked, and the recorded turn. ``styled`` adds the style it needs, to show it
    alone (e.g. ``IPython.display.HTML(pair_html(p, open=True, styled=True))`` in a notebook).

    Example:
        >>> page = pair_html({"pair_id": "c1#2", "outcome": "baseline", "summary": "skipped the lookup",
        ...                   "user": "where is my order?", "baseline": {"calls": ["get_order({})"]},
        ...                   "candidate": {"text": "Let me check."}, "recorded": None})
        >>> "<del>get_order({})</del>" in page, "<ins>me check.</ins>" in page
        (True, True)
    """
    base, cand = word_diff(_side_text(p.get("baseline")), _side_text(p.get("candidate")))
    cells = [_marked(base), _marked(cand), escape(_side_text(p.get("recorded")))]
    boxes = "".join(f"<div><b>{side}</b><pre>{cell}</pre></div>"
                    for side, cell in zip(("baseline", "candidate", "recorded"), cells, strict=True))  # fmt: skip
    user = f"<pre class=user>{escape(p['user'])}</pre>" if p.get("user") else ""
    said = f"{p.get('outcome')}" + (f", {p['severity']}" if p.get("severity") else "")
    head = f"{escape(p['pair_id'])} <span class=muted>({escape(said)})</span>: {escape((p.get('summary') or '')[:200])}"
    style = f"<style>{_PAIR_CSS}</style>" if styled else ""
    details = "<details open>" if open else "<details>"
    return f"{style}{details}<summary>{head}</summary>{user}<div class=side>{boxes}</div></details>"


def _entry_html(e: dict[str, Any]) -> str:
    """One entry of a session transcript: the agent's text, a tool call with its result and the result's source,
    or a user message with its source."""
    if e["kind"] == "agent":
        return f"<pre class=agent>{escape(str(e['text']))}</pre>"
    if e["kind"] == "user":
        source = str(e.get("source") or "")
        label = USER_LABELS.get(source, source)
        text = escape(str(e["text"]))
        return f"<div class='said said-{escape(source)}'><b>{escape(label)}</b><pre>{text}</pre></div>"
    source = str(e.get("source") or "")
    mark = (f" <span class='src src-{escape(source)}'>{escape(SOURCE_LABELS.get(source, source))}</span>"
            if e.get("result") is not None else " <span class=muted>(no result)</span>")  # fmt: skip
    result = f"<pre>{escape(str(e['result']))}</pre>" if e.get("result") is not None else ""
    return (f"<div class=call><b>{escape(str(e['name']))}</b>(<code>{escape(str(e['arguments']))}</code>){mark}"
            f"{result}</div>")  # fmt: skip


def session_html(p: dict[str, Any], *, open: bool = False) -> str:
    """One session pair of :meth:`Analysis.pairs <delta_eval.analysis.analyze.Analysis.pairs>` as HTML, collapsed
    (``open``: expanded): the judge's summary as its title; inside, the opening user message, then the baseline's
    and the candidate's transcripts side by side, every user message and tool result marked with where it came from.

    Example:
        >>> side = {"transcript": [{"kind": "agent", "text": "Your id?"},
        ...                        {"kind": "user", "text": "mia", "source": "simulated"}]}
        >>> page = session_html({"pair_id": "c1#session", "outcome": "baseline", "baseline": side, "candidate": side})
        >>> "<b>simulated user</b>" in page
        True
    """
    cols = []
    for name in ("baseline", "candidate"):
        side = p.get(name) or {}
        body = "".join(_entry_html(e) for e in side.get("transcript") or []) or "<p class=muted>(nothing)</p>"
        error = f"<p class=fail>{escape(str(side['error']))}</p>" if side.get("error") else ""
        cols.append(f"<div class=transcript data-side={name}><b>{name}</b>{body}{error}</div>")
    user = f"<pre class=user>{escape(p['user'])}</pre>" if p.get("user") else ""
    said = f"{p.get('outcome')}" + (f", {p['severity']}" if p.get("severity") else "")
    head = f"{escape(p['pair_id'])} <span class=muted>({escape(said)})</span>: {escape((p.get('summary') or '')[:200])}"
    details = "<details open>" if open else "<details>"
    return f"{details}<summary>{head}</summary>{user}<div class=side2>{''.join(cols)}</div></details>"


def _pair(p: dict[str, Any]) -> str:
    """A pair as the page shows it: a session's two transcripts, or a turn's sides."""
    return session_html(p) if p.get("session") else pair_html(p)


def _pairs_of(a: Analysis, query: str, limit: int) -> list[str]:
    """The pairs a pair-list query selects, collapsed, and a line naming how many more the viewer shows."""
    found = a.filtered(query, limit=limit)
    out = [_pair(p) for p in a.pairs(pair_ids=found["pair_ids"], limit=limit)]
    if not found["total"]:
        out.append("<p class=muted>no pair</p>")
    elif found["total"] > limit:
        out.append(f"<p class=muted>{found['total'] - limit:,} more pairs: delta-eval view {escape(str(a.path))}"
                   f" (filter {escape(query)})</p>")  # fmt: skip
    return out


def _evidence(a: Analysis, decision: dict[str, Any], limit: int) -> list[str]:
    """The pairs behind each gate, each flagged stratum and the non-inferiority test (see
    :mod:`delta_eval.analysis.evidence`), failed gates first."""
    evidence = decision.get("evidence")
    if evidence is None:  # a decision cached by an older version
        view = decision_view(a.result.decision())
        evidence = {"gates": view["gates"], "strata": view["strata"],
                    "tests": [{"text": t, "links": links} for t, links in view["tests"]]}  # fmt: skip
    out: list[str] = []
    for g in sorted(evidence["gates"], key=lambda g: bool(g["passed"])):
        mark = "<b class=pass>passed</b>" if g["passed"] else "<b class=fail>FAILED</b>"
        out.append(f"<h3>{mark} {escape(g['text'])}</h3>")
        if g.get("query"):
            out += _pairs_of(a, g["query"], limit if not g["passed"] else min(limit, 10))
        else:
            out.append("<p class=muted>no pair filter shows this gate (see the text report)</p>")
    for st in evidence["strata"]:
        if st.get("worse"):
            out.append(f"<h3><b class=fail>stratum worse</b> {escape(st['verdict'])}</h3>")
            out += _pairs_of(a, f"{st['query']}&outcome=baseline&sort=severity&dir=desc", limit)
    for test in evidence["tests"][:1]:  # the non-inferiority test: the pairs the candidate lost
        out.append(f"<h3>{escape(test['text'])}</h3>")
        out += _pairs_of(a, "outcome=baseline&sort=severity&dir=desc", limit)
    return out


#: The sections of the page, in order: (anchor, title).
_SECTIONS = (("leaderboard", "Leaderboard of the candidates"), ("decision", "Decision"),
             ("evidence", "The pairs behind each gate"),
             ("win-rate", "Win rate of the candidate"), ("funnel", "Funnel"),
             ("cost", "Cost and latency"), ("changes", "What changed"), ("themes", "Themes"),
             ("report", "The text report"))  # fmt: skip


def _h2(anchor: str) -> str:
    return f"<h2 id={anchor}>{escape(dict(_SECTIONS)[anchor])}</h2>"


def _scatter(entries: list[Any], attr: str, flag: str, label: str, width: int = 420, height: int = 220) -> str:
    """Win rate (with its interval) against ``attr`` as inline SVG, the candidates on the front in blue and joined."""
    known = [e for e in entries if getattr(e, attr) is not None and e.win_rate is not None]
    if not known:
        return f"<p class=muted>{escape(label)}: unknown</p>"
    xs = [float(getattr(e, attr)) for e in known]
    lo, hi = min(xs), max(xs)
    span = (hi - lo) or 1.0
    pad = 40

    def x(v: float) -> float:
        return round(pad + (width - 2 * pad - 80) * ((v - lo) / span if hi > lo else 0.5), 1)  # 80: names

    # the win-rate axis spans the intervals and 0.5 (no difference), not all of [0, 1]: candidates differ by points
    bottom = min([0.5, *(float(e.ci_low) for e in known if e.ci_low is not None)])
    top = max([0.5, *(float(e.ci_high) for e in known if e.ci_high is not None)])
    rise = (top - bottom) or 1.0

    def y(v: float) -> float:
        return round(height - pad - (height - 2 * pad) * (v - bottom) / rise, 1)

    axis = f"{escape(label)}: {lo:.4g} to {hi:.4g}"
    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="win rate against {escape(label)}">',
             f'<line x1="{pad}" y1="{y(0.5)}" x2="{width - pad}" y2="{y(0.5)}" stroke="#ccc"/>',
             f'<text x="{pad}" y="{height - 8}" font-size="11">{axis}</text>',
             f'<text x="2" y="{y(top) + 4}" font-size="10">{top:.2f}</text>',
             f'<text x="2" y="{y(bottom) + 4}" font-size="10">{bottom:.2f}</text>',
             f'<text x="2" y="{y(0.5) + 4}" font-size="10">0.50</text>']  # fmt: skip
    front = sorted((e for e in known if getattr(e, flag)), key=lambda e: getattr(e, attr))
    if len(front) > 1:
        points = " ".join(f"{x(getattr(e, attr))},{y(e.win_rate)}" for e in front)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#3b6fb6" stroke-dasharray="4"/>')
    for e in known:
        cx, colour = x(getattr(e, attr)), "#1d3f72" if getattr(e, flag) else "#999"
        parts.append(f'<line x1="{cx}" y1="{y(e.ci_low)}" x2="{cx}" y2="{y(e.ci_high)}" stroke="{colour}"/>')
        parts.append(f'<circle cx="{cx}" cy="{y(e.win_rate)}" r="4" fill="{colour}"/>')
        parts.append(f'<text x="{cx + 6}" y="{y(e.win_rate) - 6}" font-size="11">{escape(e.candidate)}</text>')
    return "".join(parts) + "</svg>"


def _leaderboard(a: Analysis) -> list[str]:
    """The candidates of a run of several: the leaderboard's table and both Pareto fronts drawn."""
    from delta_eval.analysis.leaderboard import leaderboard

    board = leaderboard(a.path)  # with the score the run was configured with
    out = ["<table><tr><th>candidate</th><th>model</th><th>decision</th><th>win rate [95% CI]</th><th>$/conv</th>"
           "<th>latency p50</th><th>p95</th><th>errors</th><th>Pareto front</th>"
           + ("<th>score</th>" if board.weights else "") + "</tr>"]  # fmt: skip
    for e in board.entries:
        cost = f"{e.cost_per_conversation:.4f}" if e.cost_per_conversation is not None else "unknown"
        p50 = f"{e.latency_p50_ms:.0f} ms" if e.latency_p50_ms is not None else "n/a"
        p95 = f"{e.latency_p95_ms:.0f} ms" if e.latency_p95_ms is not None else "n/a"
        errors = f"{100 * e.error_rate:.1f}%" if e.error_rate is not None else "n/a"
        front = ", ".join(e.fronts) or "-"
        score = f"<td class=n>{e.score:.3f}</td>" if board.weights and e.score is not None else ""
        out.append(f"<tr><td>{escape(e.candidate)}</td><td>{escape(e.model)}</td><td class={escape(e.outcome)}>"
                   f"{escape(e.outcome)}</td><td class=n>{e.rate}</td><td class=n>{cost}</td><td class=n>{p50}</td>"
                   f"<td class=n>{p95}</td><td class=n>{errors}</td><td>{front}</td>{score}</tr>")  # fmt: skip
    out.append("</table>")
    out.append(_scatter(board.entries, "cost_per_conversation", "front_cost", "cost per conversation (USD)")
               + _scatter(board.entries, "latency_p50_ms", "front_latency", "latency p50 (ms)"))  # fmt: skip
    out += [f"<p class=muted>{escape(n)}</p>" for n in board.notes]
    if board.weights:
        out.append("<p class=muted>the score weighs quality, latency and cost scaled across the candidates; the "
                   "decision, not the score, gates a merge</p>")  # fmt: skip
    return out


def render_html(a: Analysis, *, outcome: str = "baseline", pairs_per_theme: int = 200, pairs_per_gate: int = 50) -> str:
    """The page (see the module docstring); ``outcome`` picks the themes (default: where the candidate lost);
    each theme lists its pairs, collapsed, up to ``pairs_per_theme``, and each gate, flagged stratum and the
    non-inferiority test up to ``pairs_per_gate`` (a gate that passed: up to 10; the page names how many more
    there are)."""
    s = a.summary()
    out = [f"<!doctype html><html><head><meta charset=utf-8><title>delta_eval: {escape(str(a.path))}</title>"
           f"<style>{_CSS}</style></head><body>"]  # fmt: skip
    out.append(f"<h1>{escape(s['candidate'])} <span class=muted>vs</span> {escape(s['baseline'])}</h1>")
    shown = [(k, t) for k, t in _SECTIONS if k != "leaderboard" or a.result.candidates]
    out.append("<nav><ol>" + "".join(f"<li><a href=#{k}>{escape(t)}</a></li>" for k, t in shown) + "</ol></nav>")
    if a.result.candidates:
        out.append(_h2("leaderboard"))
        out += _leaderboard(a)
    out.append(_h2("decision"))
    if a.result.candidates:
        out.append(f"<p class=muted>of the candidate <b>{escape(str(a.result.candidate))}</b> against the baseline "
                   f"(the others: delta-eval report {escape(str(a.path))} --html --candidate NAME)</p>")  # fmt: skip
    if s.get("description"):
        out.append(f"<p>{escape(s['description'])}</p>")
    d = s.get("decision") or {}
    if d.get("outcome"):
        out.append(f"<p><b class={escape(d['outcome'])}>{escape(d['outcome'])}</b> - {escape(d['decided_by'])}</p>")
    out.append(f"<p class=muted>run folder {escape(s['run'])} ({escape(s['status'])}), {s['pairs']:,} pairs</p>")
    if s["damage"]:
        out.append("<p class=REJECTED>DAMAGED: " + escape("; ".join(s["damage"])) + "</p>")
    out.append(_h2("evidence"))
    if d.get("outcome"):
        out += _evidence(a, d, pairs_per_gate)
    else:
        out.append(f"<p class=muted>{escape(d.get('decided_by') or 'no decision')}</p>")
    out.append(_h2("win-rate") + "<table><tr><th></th><th>estimate</th><th>95% CI</th>"
               "<th>pairs</th><th>0 &larr; 0.5 &rarr; 1</th></tr>")  # fmt: skip
    out.append(_rate_row("all pairs", s["win_rate"]["all"]))
    out.append(_rate_row("judged pairs", s["win_rate"]["judged"]))
    for row in s["by_stratum"]:
        out.append(_rate_row(row["stratum"], row))
    out.append("</table>")
    out.append(_h2("funnel") + "<table>")
    for stage, n in s["funnel"].items():
        out.append(f"<tr><td>{escape(stage)}</td><td class=n>{n:,}</td></tr>")
    out.append("</table>" + _h2("cost") + "<table><tr><th>side</th><th>cost (USD)</th><th>latency p50</th>"
               "<th>p90</th><th>tool cap</th><th>errors</th></tr>")  # fmt: skip
    for side, v in s["sides"].items():
        cost = f"{v['cost_usd']:.4f}" if v["cost_usd"] is not None else "unknown"
        out.append(f"<tr><td>{escape(side)}</td><td class=n>{cost}</td><td class=n>{v['latency_ms_p50']} ms</td>"
                   f"<td class=n>{v['latency_ms_p90']} ms</td><td class=n>{v['hit_tool_cap']:.3f}</td>"
                   f"<td class=n>{v['errors']}</td></tr>")  # fmt: skip
    for role, sim in (s.get("simulating") or {}).items():  # a session run's simulators: their calls, not a side's
        cost = f"{sim['cost_usd']:.4f}" if sim["cost_usd"] is not None else "unknown"
        p50 = f"{sim['latency_ms_p50']} ms" if sim["latency_ms_p50"] is not None else "n/a"
        name = f"{escape(SIMULATOR_PARTS.get(role, role))} <span class=muted>({sim['calls']:,} calls)</span>"
        out.append(f"<tr><td>{name}</td><td class=n>{cost}</td><td class=n>{p50}</td><td></td><td></td><td></td></tr>")
    out.append("</table>" + _h2("changes") + "<table><tr><th></th><th>baseline</th><th>candidate (95% CI)</th></tr>")
    for row in a.changes():
        if row["kind"] == "behaviour":
            b, c = row["baseline"], row["candidate"]
            out.append(f"<tr><td>{escape(row['behaviour'])}</td><td class=n>{b['rate']:.3f}</td>"
                       f"<td class=n>{c['rate']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]</td></tr>")  # fmt: skip
        elif row["kind"] == "difference" and row["pairs"]["count"]:
            tools = ", ".join(f"{k} {v}" for k, v in row["tools"].items())
            out.append(f"<tr><td>calls differ: {escape(row['behaviour'])}</td><td class=n>"
                       f"{row['pairs']['count']} pairs</td><td>{escape(tools)}</td></tr>")  # fmt: skip
    out.append("</table>")
    who = {"baseline": "where the candidate lost", "candidate": "where the candidate won"}.get(outcome, outcome)
    out.append(_h2("themes") + f"<p class=muted>{escape(who)}</p>")
    themes = a.themes(outcome=outcome)  # type: ignore[arg-type]
    if not themes:
        out.append("<p class=muted>no stage-3 verdict with this outcome</p>")
    for t in themes:
        section = f" &middot; prompt section: <i>{escape(section_label(t))}</i>" if t.get("section") else ""
        out.append(f"<h3>#{t['id']} {escape(t['name'])} <span class=muted>{t['size']} pairs "
                   f"({100 * t['share']:.0f}%)</span>{section}</h3>")  # fmt: skip
        out += [_pair(p) for p in a.pairs(theme=t["id"], outcome=outcome, limit=pairs_per_theme)]  # type: ignore[arg-type]
        if t["size"] > pairs_per_theme:
            out.append(f"<p class=muted>{t['size'] - pairs_per_theme:,} more pairs: delta-eval view "
                       f"{escape(str(a.path))}</p>")  # fmt: skip
    out.append(_h2("report") + "<pre>" + escape(render_report(a.result)) + "</pre></body></html>")
    return "\n".join(out)


def write_html(a: Analysis, path: str | Path | None = None, **options: Any) -> Path:
    """Write :func:`render_html` to ``path`` (default ``RUN/report.html``) and return where."""
    target = Path(path) if path is not None else a.path / "report.html"
    text = render_html(a, **options)
    if safe_paths.inside(a.path, target):
        safe_paths.write_text(a.path, target, text)  # never through a link inside the run folder
    else:
        target.write_text(text, encoding="utf-8")
    return target
