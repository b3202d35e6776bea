"""CI mode: what a merge gate needs from a run folder. Its exit status (:class:`~delta_eval.metrics.ExitCode`), a
Markdown summary short enough for a pull-request comment or a GitHub step summary, and a JUnit XML file with one
test case per gate and per stratum, so a CI test reporter shows which check failed.

Everything is built from the :class:`~delta_eval.metrics.Decision` and the run's DuckDB views, never by parsing
the text report.

Example:
    >>> result = de.open_result("runs/prompt-v2")                             # doctest: +SKIP
    >>> code = gate(result, fail_on="rejected", summary=Path("summary.md"), junit=Path("junit.xml"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import quote

from delta_eval.metrics import Decision, ExitCode, FailOn
from delta_eval.redact import scrub_known
from delta_eval.result import RunResult
from delta_eval.store import safe_paths

__all__ = ["gate", "gate_error", "junit_xml", "sessions_of", "summary_markdown"]

#: Losing pairs listed in the summary: enough to see a pattern, few enough for a PR comment.
WORST_PAIRS = 5
#: Where the viewer (``delta-eval view RUN``, on its default port) serves one pair of its first run.
PAIR_URL = "http://127.0.0.1:8765/run/0/pair?id={pair_id}"

_MARK = {"APPROVED": "✅", "PARTIAL": "⚠️", "REJECTED": "❌"}


def gate(
    result: RunResult,
    *,
    fail_on: FailOn = "rejected",
    summary: Path | None = None,
    junit: Path | None = None,
    step_summary: bool = True,
) -> ExitCode:
    """Gate a merge on a run: write the Markdown ``summary`` and the ``junit`` XML where asked (and append the
    summary to ``$GITHUB_STEP_SUMMARY`` when that variable is set and ``step_summary``), and return the exit status
    (``ExitCode.INCOMPLETE`` for a run that gives no decision)."""
    why = result.unfinished()
    decision = None if why is not None else result.decision()
    code = ExitCode.INCOMPLETE if decision is None else decision.exit_code_at(fail_on)
    text = summary_markdown(result, decision, code=code, fail_on=fail_on)
    _write_summary(text, summary, step_summary=step_summary, run=result.path)
    if junit is not None:
        _write(junit, junit_xml(decision, code=code, unfinished=why, run=str(result.path)), result.path)
    return code


def gate_error(
    message: str, code: ExitCode, *, summary: Path | None = None, junit: Path | None = None, step_summary: bool = True
) -> None:
    """The summary and JUnit file of a run that could not start (a bad configuration, a missing key): the error in
    one line, so a CI page says why the gate has no decision."""
    text = f"### delta-eval: 🛑 no decision (exit {int(code)})\n\n{_md(message)}\n"
    _write_summary(text, summary, step_summary=step_summary)
    if junit is not None:
        _write(junit, junit_xml(None, code=code, unfinished=message))


def sessions_of(run_dir: Path) -> int:
    """How many sessions the manifest of ``run_dir`` records (0 when there is none yet): a run that raised after
    adding one had started, so its failure is ``INCOMPLETE``, not a configuration error."""
    try:
        data = json.loads((Path(run_dir) / "manifest.json").read_bytes())
    except (OSError, ValueError):
        return 0
    sessions = data.get("sessions") if isinstance(data, dict) else None
    return len(sessions) if isinstance(sessions, list) else 0


# -- Markdown ----------------------------------------------------------------------------------------------------


def summary_markdown(result: RunResult, decision: Decision | None, *, code: ExitCode, fail_on: FailOn) -> str:
    """The run in a few lines of Markdown: the decision and what decided it, the win rate with its interval, cost
    and latency per side, the gates that did not pass, and the most severe pairs the candidate lost."""
    run = _shown(result.path)
    m = result.manifest
    if decision is None:
        out = [f"### delta-eval: 🛑 no decision (exit {int(code)})", "", _md(result.unfinished() or "")]
    else:
        gated = f"fails on {fail_on}" if fail_on != "never" else "report only"
        out = [
            f"### delta-eval: {_MARK[decision.outcome]} {decision.outcome} (exit {int(code)}, {gated})",
            "",
            f"**Decided by** {_md(decision.decided_by)}",
            "",
        ]
        ni = decision.non_inferiority
        w = ni.win_rate
        if w.estimate is not None:
            more = f", need about {ni.more_conversations} more conversations" if ni.more_conversations else ""
            out.append(
                f"**Win rate** of the candidate {w.estimate:.1%} [{w.ci_low:.1%}, {w.ci_high:.1%}] "
                f"({w.confidence:.0%} CI, {w.pairs} pairs, {w.clusters} conversations; {_md(decision.estimand)}); "
                f"non-inferiority: {ni.verdict}{more} (margin {decision.rule.margin * 100:g} points)"
            )
        else:
            out.append("**Win rate**: no pairs to estimate it from")
        off = [g for g in decision.gates if g.passed is not True]
        passed = sum(g.passed is True for g in decision.gates)
        out += ["", f"**Gates**: {passed} of {len(decision.gates)} passed"]
        out += [f"- {_md(str(g))}" for g in off]
        worse = [s.stratum for s in decision.strata if s.worse]
        if len(decision.strata) > 1:
            out += ["", f"**Strata**: {len(decision.strata)} tested; worse: {_md(', '.join(worse) or 'none')}"]
    con = result.connect()
    try:
        out += ["", *_sides_table(con, m.baseline_model, m.candidate_model)]
        out += _worst_pairs(con, run)
    finally:
        con.close()
    out += ["", f"Run folder `{_code(run)}`; full report: `delta-eval report {_code(run)}`"]
    return "\n".join(out) + "\n"


def _sides_table(con: Any, baseline: str, candidate: str) -> list[str]:
    rows = con.execute(
        """
        SELECT side, count(*), fsum(cost_usd), bool_or(cost_usd IS NULL), quantile_cont(latency_ms, 0.5),
               quantile_cont(latency_ms, 0.95), count(error)
        FROM replays WHERE side IN ('baseline', 'candidate') GROUP BY side
        """
    ).fetchall()
    by_side = {r[0]: r[1:] for r in rows}
    if not by_side:
        return []

    def cells(side: str) -> list[str]:
        n, cost, unknown, p50, p95, errors = by_side.get(side, (0, None, True, None, None, 0))
        # A cost with any unpriced call is unknown, never a smaller total (as in the report).
        said = "unknown" if unknown or cost is None else f"${cost:.4f}"
        lat = "n/a" if p50 is None else f"{p50 / 1000:.2f} s / {p95 / 1000:.2f} s"
        return [str(n), said, lat, str(errors)]

    b, c = cells("baseline"), cells("candidate")
    head = f"| | baseline `{_code(baseline)}` | candidate `{_code(candidate)}` |"
    names = ["replays", "cost", "latency p50 / p95", "errors"]
    return [head, "|---|---|---|", *(f"| {n} | {x} | {y} |" for n, x, y in zip(names, b, c, strict=True))]


def _worst_pairs(con: Any, run: str) -> list[str]:
    lost = con.execute("SELECT count(*) FROM verdicts WHERE outcome = 'baseline'").fetchone()[0]
    if not lost:
        return []
    # Most severe first: critical, then minor; within a severity, the pairs the judges held most surely lost.
    rows = con.execute(
        f"""
        SELECT pair_id, stratum, coalesce(severity, 'none'),
               coalesce(nullif(summary, ''), nullif(reasoning, ''), error, '')
        FROM verdicts WHERE outcome = 'baseline'
        ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'minor' THEN 1 ELSE 2 END, preference NULLS LAST, pair_id
        LIMIT {WORST_PAIRS}
        """
    ).fetchall()
    out = ["", f"**Most severe losing pairs** ({len(rows)} of {lost} the baseline won)", ""]
    out += ["| pair | stratum | severity | judge |", "|---|---|---|---|"]
    for pair_id, stratum, severity, said in rows:
        out.append(f"| `{_code(pair_id)}` | {_md(stratum or '')} | {severity} | {_md(_one_line(said))} |")
    example = PAIR_URL.format(pair_id=quote(str(rows[0][0]), safe=""))
    out += ["", f"Open a pair: `delta-eval view {_code(run)}` serves each at `{example}` (its id after `id=`)"]
    return out


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it: a CI page shows ``runs/x``, not the
    runner's absolute path, and the commands it gives work from the repository's root."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _one_line(text: str, limit: int = 140) -> str:
    said = " ".join(str(text).split())
    return said if len(said) <= limit else said[: limit - 1] + "…"


def _md(text: str) -> str:
    """Text safe in a Markdown paragraph or table cell: on one line, with the characters that would start markup,
    HTML or a new cell escaped (a judge's words are data, not formatting)."""
    return re.sub(r"([\\`*_\[\]<>|~&#])", r"\\\1", " ".join(str(text).split()))


def _code(text: str) -> str:
    """Text safe inside a one-backtick code span (in a table too): a backtick or a pipe would end it."""
    return " ".join(str(text).split()).replace("`", "'").replace("|", "/")


def _write_summary(text: str, path: Path | None, *, step_summary: bool, run: Path | None = None) -> None:
    text = scrub_known(text)
    step = os.environ.get("GITHUB_STEP_SUMMARY") if step_summary else None
    if path is not None and not (step and Path(step).resolve() == Path(path).resolve()):
        _write(path, text, run)
    if step:
        # Appended: the step summary collects what every command of the step wrote.
        with Path(step).open("a", encoding="utf-8") as f:
            f.write(text)


def _write(path: Path, text: str, run: Path | None = None) -> None:
    """Write ``text`` without any credential the process knows: like the console, a CI page may quote a provider's
    or a judge's words, and those may echo a key. Inside the ``run`` folder, never through a link (as every write
    there); elsewhere, where the user asked."""
    path, text = Path(path), scrub_known(text)
    if run is not None and safe_paths.inside(run, path):
        safe_paths.write_text(run, path, text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# -- JUnit XML ---------------------------------------------------------------------------------------------------


def junit_xml(decision: Decision | None, *, code: ExitCode, unfinished: str | None = None, run: str = "") -> str:
    """A JUnit XML document (testsuites / testsuite / testcase, the schema CI test reporters read): a ``run``
    suite (the run finished; the decision passed the gate), a ``gates`` suite with non-inferiority and one case per
    gate (``failure`` when it fails, ``skipped`` when not evaluated or undecided), and, when the sample has strata
    (more than one, as the decision tests them), a ``strata`` suite with one case per stratum (``failure`` when
    shown worse after the multiplicity adjustment).

    Example:
        >>> from delta_eval.metrics import decide, DecisionRule
        >>> rows = [{"outcome": "equivalent", "conversation_id": f"c{i}", "stratum": f"tier=<{i % 2}>"}
        ...         for i in range(4)]
        >>> xml = junit_xml(decide(rows, rule=DecisionRule(gates=())), code=ExitCode.OK)
        >>> '<testcase name="tier=&lt;1&gt;" classname="delta_eval.strata" time="0"' in xml
        True
    """
    root = ET.Element("testsuites", name="delta-eval")
    suite = _suite(root, "run", run)
    finished = _case(suite, "run finished", "delta_eval.run")
    if decision is None:
        _fail(finished, unfinished or "the run gave no decision", f"exit {int(code)}")
    else:
        decided = _case(suite, f"decision {decision.outcome}", "delta_eval.run")
        if code != ExitCode.OK:
            _fail(decided, f"{decision.outcome}: {decision.decided_by}", decision.outcome, "\n".join(decision.lines()))
        gates = _suite(root, "gates", run)
        ni = decision.non_inferiority
        case = _case(gates, f"non-inferiority (margin {ni.margin:g})", "delta_eval.gates")
        if ni.verdict == "worse":
            _fail(case, str(ni), "REJECTED")
        elif ni.verdict == "undecided":
            ET.SubElement(case, "skipped", message=_clean(str(ni)))
        for g in decision.gates:
            case = _case(gates, g.gate.label, "delta_eval.gates")
            if g.passed is False:
                _fail(case, str(g), g.gate.on_fail)
            elif g.passed is None:
                ET.SubElement(case, "skipped", message=_clean(f"not evaluated: {g.detail}"))
        # One stratum is the whole sample, the non-inferiority case above; the decision tests strata only beyond it.
        if len(decision.strata) > 1:
            _strata(_suite(root, "strata", run), decision)
    for suite in root:
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        suite.set("errors", "0")
        suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
    # The common schema (Jenkins' junit-10.xsd) counts skipped cases per suite only.
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in root)))
    root.set("time", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _strata(suite: ET.Element, decision: Decision) -> None:
    for s in decision.strata:
        case = _case(suite, s.stratum, "delta_eval.strata")
        w = s.win_rate
        said = "no pairs" if w.estimate is None else f"win rate {w.estimate:.1%} [{w.ci_low:.1%}, {w.ci_high:.1%}]"
        if s.worse:
            _fail(case, f"worse: {said}, p(worse) adjusted {s.p_worse_adjusted:.3g}", decision.rule.stratum_worse)
        elif w.estimate is None:
            ET.SubElement(case, "skipped", message="no pairs")


def _suite(root: ET.Element, name: str, run: str) -> ET.Element:
    suite = ET.SubElement(root, "testsuite", name=f"delta-eval {name}", time="0")
    if run:
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="run", value=_clean(run))
    return suite


def _case(suite: ET.Element, name: str, classname: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", name=_clean(name), classname=classname, time="0")


def _fail(case: ET.Element, message: str, kind: str, text: str | None = None) -> None:
    failure = ET.SubElement(case, "failure", message=_clean(message), type=kind)
    failure.text = _clean(text if text is not None else message)


def _clean(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot hold at all (ElementTree escapes ``<``, ``&`` and quotes, but
    writes a control character as is, which no parser reads back)."""
    return re.sub(r"[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]", "\ufffd", str(text))
