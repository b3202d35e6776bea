"""The analysis of a run, for people and coding agents: compact answers from the run folder, computed once and kept
beside the run (``RUN/analysis/``), so an agent calls a function instead of reading Parquet into its context.

Example::

    a = de.analyze("runs/prompt-v2")
    a.summary()                        # win rates overall and per stratum, funnel, cost, latency, the decision
    a.changes()                        # behaviours per side with intervals, and how the calls differ
    a.themes(outcome="baseline")       # clusters of the judge's reasons where the candidate lost
    a.pairs(theme=0, limit=5)          # the pairs behind a theme, both outputs side by side

``de.analyze`` (:func:`~delta_eval.analysis.comparison.analyze`) gives an :class:`Analysis` for one run folder and a
:class:`~delta_eval.analysis.comparison.Comparison` for several.

Every method returns JSON-ready data (dicts and lists of plain values); ``delta-eval analyze RUN_DIR --json``
prints the same. Cached analyses are dropped when the run gains pairs.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs

import numpy as np
import pyarrow.parquet as pq

from delta_eval.analysis.changes import changes, pair_behaviours
from delta_eval.analysis.evidence import decision_view
from delta_eval.analysis.naming import LLMNamer
from delta_eval.analysis.pair_filter import PairFilter, create_index
from delta_eval.analysis.sections import diff_sections, prompt_sections
from delta_eval.analysis.spend import SideSpend, SpendRow, side_spend, spend_rows
from delta_eval.analysis.themes import attribute, find_themes
from delta_eval.analysis.transcripts import transcript_entries
from delta_eval.exceptions import RunFolderLinkError
from delta_eval.metrics.counted import Counted, shared_sums, weights_vary_sql
from delta_eval.metrics.decision import DecisionRule
from delta_eval.metrics.decision_sql import shared_latencies, side_latencies
from delta_eval.metrics.estimand import Estimand, sql_contribution
from delta_eval.metrics.frames import to_arrow
from delta_eval.metrics.tallied import tallied_or_counted
from delta_eval.replay.points import replay_points
from delta_eval.result import RunResult, open_result, shared_tallies
from delta_eval.store import safe_paths
from delta_eval.store.tables import TABLES

__all__ = ["Analysis", "saved_themes"]


#: The definition of the summary's figures, in the name of its cached file: a run's summary cached where they were
#: defined otherwise (unnumbered: the sides' latencies of every replay, failed ones too) is computed again.
_SUMMARY_VERSION = 2


def _cache_figures(spend: SideSpend | None) -> dict[str, Any]:
    """A side's prompt-cache figures for the summary (``None`` where unknown)."""
    if spend is None:
        return {}
    saved = spend.saved_usd
    return {
        "cache_read_tokens": spend.cache_read_tokens,
        "cache_write_tokens": spend.cache_write_tokens,
        "cost_usd_at_full_price": round(spend.full_price_usd, 6) if spend.full_price_usd is not None else None,
        "saved_by_caching_usd": round(saved, 6) if saved is not None else None,
    }


def _side_figures(row: SpendRow, latencies: np.ndarray, spend: SideSpend | None) -> dict[str, Any]:
    """A side's figures for the summary from its replays added up (the ``whole_side`` row of :func:`spend_rows`)
    and its latencies of the turns that did not fail, in any order (:func:`side_latencies`)."""
    p50, p90 = (float(q) for q in np.quantile(latencies, [0.5, 0.9])) if len(latencies) else (0.0, 0.0)
    counted = row.unknown_usage == 0  # a replay without usage: the side's tokens unknown (null), never a partial sum
    return {
        "replays": row.replays,
        "cost_usd": round(row.cost_usd, 6) if row.unpriced == 0 and row.cost_usd is not None else None,
        "input_tokens": int(row.input_tokens or 0) if counted else None,
        "output_tokens": int(row.output_tokens or 0) if counted else None,
        **_cache_figures(spend),
        "latency_ms_p50": round(p50, 1),
        "latency_ms_p90": round(p90, 1),
        "hit_tool_cap": round(int(row.hit_tool_cap or 0) / row.tool_cap_known, 4) if row.tool_cap_known else 0.0,
        "errors": row.errors,
    }


def _scans(con: Any) -> tuple[dict[Any, int], dict[Any, int], list[SpendRow]]:
    """The summary's scans of the run open on ``con``: the pairs by stage and by outcome (one scan of the verdicts,
    grouping sets, each in its order), and each side's replays added up per model (:func:`spend_rows`: its figures
    and its spend)."""
    con.execute("SET parquet_metadata_cache = true")  # (a cursor does not inherit its connection's setting)
    funnel: dict[Any, int] = {}
    outcomes: dict[Any, int] = {}
    for by_outcome, stage, outcome, n in con.execute(
        "SELECT GROUPING(stage) AS g, stage, outcome, count(*) FROM verdicts "
        "GROUP BY GROUPING SETS ((stage), (outcome)) ORDER BY g, stage, outcome"
    ).fetchall():
        if by_outcome:
            outcomes[outcome] = n
        else:
            funnel[stage] = n
    return funnel, outcomes, spend_rows(con)


def _win_rate(c: Counted) -> dict[str, Any] | None:
    """The win rate of an estimand's counted pairs with the decision's interval: the figures of
    :meth:`RunResult.win_rate` (same estimand, same pairs, the same sums)."""
    if c.pairs == 0:
        return None
    d = c.sums.difference()
    assert d.estimate is not None
    return {
        "estimate": round(0.5 + d.estimate / 2, 4),
        "lo": round(0.5 + d.ci_low / 2, 4),
        "hi": round(0.5 + d.ci_high / 2, 4),
        "pairs": d.pairs,
        "conversations": d.clusters,
    }


class Analysis:
    """The analyses of one run folder (see the module docstring)."""

    def __init__(self, run: str | Path | RunResult) -> None:
        self.result = run if isinstance(run, RunResult) else open_result(run)
        self.path = self.result.path
        self.cache = self.result.analysis_dir
        self._con: Any = None
        self._figures_con: Any = None
        self._indexed = False
        self._fresh_cache()

    # -- cache -------------------------------------------------------------------------------------------------

    def _stamp(self) -> str:
        m = self.result.manifest  # saved_themes reads the same stamp
        return f"{m.batches}:{m.counts.pairs}:{m.ended_at}"

    def _fresh_cache(self) -> None:
        stamp = self.cache / "stamp.json"
        try:
            current = json.loads(stamp.read_text(encoding="utf-8")).get("stamp")
        except (OSError, ValueError):
            current = None
        if current != self._stamp():
            # The run changed: every cached analysis is stale. Never through a link (its target is not ours).
            try:
                safe_paths.rmtree(self.path, self.cache)
            except RunFolderLinkError:
                raise
            except OSError:
                pass  # a read-only folder: analyses are computed, not cached

    def _stamped_cache(self) -> Path:
        """The cache folder, created and stamped with the run as it is now."""
        safe_paths.write_text(self.path, self.cache / "stamp.json", json.dumps({"stamp": self._stamp()}))
        return self.cache

    def _save(self, name: str, data: Any) -> None:
        text = json.dumps(data, ensure_ascii=False, indent=1)
        safe_paths.write_text(self.path, self._stamped_cache() / name, text)

    def _load(self, name: str) -> Any:
        try:
            return json.loads((self.cache / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    @property
    def con(self) -> Any:
        """The run's DuckDB connection (views over its datasets, see :func:`delta_eval.open_run`)."""
        if self._con is None:
            self._con = self.result.connect()
            if self._figures_con is not None:  # the figures are read from this one now: the other is closed
                self._figures_con.close()
                self._figures_con = None
        return self._con

    @property
    def _figures(self) -> Any:
        """The connection the figures (the summary, the decision, the win rates) are read from: :attr:`con` where
        it is open, else one of the verdicts and replays alone (the views of every dataset cost a summary of a
        million pairs a twentieth of its time; what else it reads opens :attr:`con`)."""
        if self._con is not None:
            return self._con
        if self._figures_con is None:
            self._figures_con = self.result.connect(("verdicts", "replays"))
        return self._figures_con

    # -- summary -----------------------------------------------------------------------------------------------

    @property
    def _rule_estimand(self) -> Estimand:
        """The estimand of the run's decision rule, as configured."""
        return DecisionRule.model_validate(self.result.manifest.config.get("decision") or {}).estimand

    def estimand(self, over: Literal["all", "judged"] | None = None) -> Estimand:
        """The estimand of the run's decision rule (``over`` replaced when given), with ``weighted="auto"`` settled
        on the run's weights."""
        e = self._rule_estimand if over is None else self._rule_estimand.model_copy(update={"over": over})
        if e.weighted == "auto":
            _, _, counted_where = sql_contribution(e, has_error_side=self._error_side_column)
            e = e.model_copy(update={"weighted": weights_vary_sql(self._figures, "verdicts", counted_where)})
        return e

    @functools.cached_property
    def _error_side_column(self) -> bool:
        # Folders written before verdicts said which side failed have no such column (the SQL reads the text).
        return "error_side" in {row[0] for row in self._figures.execute("DESCRIBE verdicts").fetchall()}

    def _win_rates(self, *, judged: bool) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        # Summed per stratum from the verdicts' tallies where they serve, else per conversation and stratum by
        # DuckDB over the run's files (metrics.counted): what RunResult.win_rate and the decision read too.
        con = self._figures
        tallies = shared_tallies(con)  # (of the connection's snapshot: what its decision reads too)
        if judged:
            e = self.estimand("judged")
            return _win_rate(tallied_or_counted(tallies, "verdicts", e, con=con)[""]), []
        # Over all pairs, weighted="auto" is left to counted, which settles it as estimand() does (on the counted
        # rows' weights, from the counts query it runs anyway): the decision's very queries, run once within
        # shared_sums. Tallies settle it alike (on the counted tallies' weights).
        e = self._rule_estimand.model_copy(update={"over": "all"})
        whole: dict[str, Any] = {}
        groups = tallied_or_counted(tallies, "verdicts", e, con=con, by="stratum", null="None", total=whole)
        total = whole[""]
        per = [{"stratum": h, **rate} for h, c in sorted(groups.items()) if (rate := _win_rate(c)) is not None]
        return _win_rate(total), per

    def summary(self, *, decision: bool = True) -> dict[str, Any]:
        """The run in one dict: what was compared, the funnel (pairs by stage, errors), the win rate over all pairs
        and over judged pairs with a cluster-robust 95% interval (the figures of ``RunResult.win_rate``), per stratum
        too, cost, tokens and latency per side, judge spend per stage, a session run's simulator spend per role, and
        the decision with its gates (:meth:`decision`; ``decision=False`` leaves it out). Everything is computed in
        DuckDB over the run's files, whatever its size."""
        name = f"summary-{int(decision)}-v{_SUMMARY_VERSION}.json"  # (a summary of another version's figures: unread)
        cached = self._load(name)
        if cached is not None:
            return dict(cached)
        # The decision reads the same sums as the win rates (over all pairs, per stratum, over judged pairs): the
        # run's views do not change, so each query runs once.
        with shared_sums():
            data = self._summary(decision)
        self._save(name, data)
        return data

    def _summary(self, decision: bool) -> dict[str, Any]:
        m = self.result.manifest
        con = self._figures
        # The scans of the funnel and of the spend run on a cursor of their own, in a thread, while the win rates
        # and the decision compute (mostly in Python: the scans have a core the while); DuckDB releases the GIL.
        cursor = con.cursor()
        try:
            with ThreadPoolExecutor(1) as pool:
                scans = pool.submit(_scans, cursor)
                overall, by_stratum = self._win_rates(judged=False)
                decided = self.decision() if decision else None  # (first: the sides' latencies are its)
                funnel, outcomes, spent = scans.result()
        finally:
            cursor.close()
        cache = {x.side: x for x in side_spend(con, m.config.get("prices"), rows=spent)}
        rows = {row.side: row for row in spent if row.whole_side}
        latencies = shared_latencies(con)
        if latencies is None or not set(rows) <= set(latencies):
            latencies = side_latencies(con, "replays", sorted(rows), sort=False)  # (quantiles alone)
        data: dict[str, Any] = {
            "run": str(self.path),
            "status": m.status,
            "baseline": m.baseline,
            "candidate": m.candidate,
            "description": m.description,
            "pairs": sum(funnel.values()),
            "funnel": funnel,
            "outcomes": outcomes,
            "win_rate": {"all": overall, "judged": self._win_rates(judged=True)[0]},
            "by_stratum": by_stratum,
            "sides": {side: _side_figures(mine, latencies[side], cache.get(side)) for side, mine in rows.items()},
            "judging": {stage: spend.model_dump() for stage, spend in m.counts.judging.items()},
            "simulating": {role: spend.model_dump() for role, spend in m.counts.simulating.items()},
            "damage": [str(d) for d in self.result.damage],
        }
        if decided is not None:
            data["decision"] = decided
        return data

    def decision(self) -> dict[str, Any]:
        """The decision on the run (APPROVED / PARTIAL / REJECTED), what decided it, and its lines: the gates,
        the non-inferiority test, the strata (see :meth:`RunResult.decision`)."""
        cached = self._load("decision.json")
        if cached is not None:
            return dict(cached)
        d = self.result.decision(con=self._figures)  # figures only: no list of every latency and every cost
        view = decision_view(d)
        evidence = {"tests": [{"text": text, "links": [list(x) for x in links]} for text, links in view["tests"]],
                    "gates": view["gates"], "strata": view["strata"]}  # fmt: skip
        data = {"outcome": d.outcome, "decided_by": d.decided_by, "estimand": d.estimand, "lines": d.lines(),
                "evidence": evidence}  # fmt: skip
        self._save("decision.json", data)
        return data

    def filtered(self, query: str, *, limit: int = 50) -> dict[str, Any]:
        """The pairs a pair-list query selects (the viewer's URL form, e.g. ``"outcome=baseline&severity=critical"``
        or a gate's query in :meth:`decision`'s ``evidence``), in its order: how many (``total``) and the first
        ``limit`` pair ids. The viewer's list filters (:class:`~delta_eval.analysis.pair_filter.PairFilter`) over
        the same index, built once per analysis."""
        f = PairFilter.from_query(parse_qs(query))
        if not self._indexed:
            create_index(self.con, saved_themes(self.result))
            self._indexed = True
        where, params = f.where()
        order = f" ORDER BY {f.order_by()}"
        ((total,),) = self.con.execute(f"SELECT count(*) FROM pair_index WHERE {where}", params).fetchall()
        rows = self.con.execute(f"SELECT pair_id FROM pair_index WHERE {where}{order} LIMIT ?", [*params, limit])
        return {"query": query, "total": int(total), "pair_ids": [str(r[0]) for r in rows.fetchall()]}

    # -- changes -----------------------------------------------------------------------------------------------

    def behaviours(self) -> Any:
        """Per pair, how the sides' calls differ and what each side did (an Arrow table; see
        :func:`~delta_eval.analysis.changes.pair_behaviours`), cached as ``analysis/behaviours.parquet``."""
        path = self.cache / "behaviours.parquet"
        if path.exists():
            return pq.read_table(path)
        table = pair_behaviours(self.con)
        pq.write_table(table, safe_paths.check(self.path, self._stamped_cache() / path.name))
        return table

    def changes(self, *, by: Literal["stratum"] | None = None) -> list[dict[str, Any]]:
        """Which behaviours changed: per side rates with intervals, the kinds of call differences with the tools
        and arguments involved, reply length (see :func:`~delta_eval.analysis.changes.changes`)."""
        return changes(self.behaviours(), by=by)

    # -- themes ------------------------------------------------------------------------------------------------

    def _reasons(self, outcome: str) -> list[tuple[str, str]]:
        rows = self.con.execute(
            "SELECT pair_id, trim(summary || ' ' || reasoning) FROM verdicts "
            "WHERE stage = 'judge' AND outcome = ? ORDER BY pair_id",
            [outcome],
        ).fetchall()
        return [(p, t) for p, t in rows if t]

    def system_prompt(self, side: Literal["baseline", "candidate"] = "candidate") -> str:
        """A side's system prompt as one conversation of the run saw it (the side's template filled with that
        conversation's recorded prompt; the recorded prompt itself when the side keeps it), for attributing themes
        to its sections and comparing the two sides' sections."""
        recorded = ""
        rows = self.con.execute("SELECT messages FROM conversations WHERE messages IS NOT NULL LIMIT 1").fetchall()
        if rows:
            messages = json.loads(rows[0][0])
            recorded = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        template = (self.result.manifest.config.get(side) or {}).get("system_prompt")
        if not template:
            return recorded
        return str(template).replace("{{recorded_system_prompt}}", recorded)

    def tool_names(self) -> list[str]:
        """Every tool name the run knows: the conversations' tool specs and the calls any side made (a side may
        call a tool no spec lists), sorted."""
        names = {
            str(row[0])
            for row in self.con.execute(
                "SELECT DISTINCT c.name FROM (SELECT unnest(steps) AS s FROM replays), unnest(s.tool_calls) AS t(c)"
            ).fetchall()
            if row[0]
        }
        for (specs,) in self.con.execute("SELECT DISTINCT tools FROM conversations WHERE tools IS NOT NULL").fetchall():
            try:
                parsed = json.loads(specs)
            except ValueError:
                continue
            if isinstance(parsed, list):
                names.update(str(t["name"]) for t in parsed if isinstance(t, dict) and t.get("name"))
        return sorted(names)

    def namer(self, names: str = "auto") -> LLMNamer | None:
        """What names the themes: ``"auto"``, the run's stage-3 judge model when it is an LLM; ``"terms"``, nobody
        (themes are named by their top terms); any other value, that model id."""
        if names == "terms":
            return None
        config = self.result.manifest.config
        cache = Path(config.get("cache") or self.path / "cache.sqlite")
        if names != "auto":
            return LLMNamer(names, cache_path=cache, root=self.path)
        models = self.result.manifest.judge_models.get("judge") or []
        if not models:
            return None
        judge = (config.get("judges") or {}).get("judge")
        options = judge.get("provider_options") if isinstance(judge, dict) and judge.get("model") == models[0] else {}
        return LLMNamer(models[0], options or {}, cache_path=cache, root=self.path)

    def themes(
        self,
        *,
        outcome: Literal["baseline", "candidate", "tie"] = "baseline",
        k: int | None = None,
        seed: int | None = None,
        names: str = "auto",
        embed: Callable[[list[str]], Any] | str | None = None,
    ) -> list[dict[str, Any]]:
        """Clusters of the stage-3 judge's reasons for pairs with this ``outcome`` (``baseline``: where the
        candidate lost), largest first: id, name, size, share, terms, example pair ids and reasons, and the system
        prompt section they are attributed to, sections the candidate's prompt changed first (how it changed:
        ``section_change``, added / removed / reworded / unchanged; how sure: ``confidence``, high / medium / low;
        see :func:`~delta_eval.analysis.themes.attribute`). Reasons are clustered with the run's tool names masked,
        so that one behaviour is one theme whatever tool it concerned.
        Names come from an LLM (:meth:`namer`: by default the run's judge model,
        one cached call per theme) or, with ``names="terms"`` or no LLM judge, from the theme's top terms. Cached
        per outcome, ``k``, ``seed`` (default: the run's seed), ``names`` and ``embed``: an embedding model id
        (``"openai:text-embedding-3-small"``, key from the environment) or a function giving each reason a vector,
        clustered instead of TF-IDF (cached by its name)."""
        seed = self.result.manifest.seed if seed is None else seed
        if isinstance(embed, str):
            from delta_eval.adapters.embeddings import Embedder  # needs the openai SDK: only when asked for

            embed = Embedder(embed)
        space = "tfidf" if embed is None else getattr(embed, "__qualname__", type(embed).__name__)
        # "v2": themes cached before the tool masking and the section diff are not read as current ones
        key = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{outcome}-{k}-{seed}-{names}-{space}-v2")
        name = f"themes-{key}.json"
        cached = self._load(name)
        if cached is not None:
            return list(cached)
        reasons = self._reasons(outcome)
        tools = self.tool_names()
        themes = find_themes([t for _, t in reasons], [p for p, _ in reasons], seed=seed, k=k, embed=embed,
                             tools=tools)  # fmt: skip
        namer = self.namer(names)
        if namer is not None and themes:
            for theme, label in zip(themes, namer.name_all([(t.terms, t.examples) for t in themes]), strict=True):
                theme.name = label
        text = dict(reasons)
        sections = diff_sections(prompt_sections(self.system_prompt("baseline")), prompt_sections(self.system_prompt()))
        attribute(themes, {t.id: [text[p] for p in t.members] for t in themes}, sections, tools=tools)
        data = [t.to_dict(members=True) for t in themes]
        self._save(name, data)
        return data

    # -- pairs -------------------------------------------------------------------------------------------------

    def pairs(
        self,
        *,
        theme: int | None = None,
        outcome: Literal["baseline", "candidate", "tie"] = "baseline",
        pair_ids: list[str] | None = None,
        limit: int = 5,
    ) -> list[dict[str, Any]]:
        """Pairs with both outputs side by side (text and tool calls, the recorded turn too; in a session run each
        side's ``transcript``, see :func:`~delta_eval.analysis.transcripts.transcript_entries`) and the judge's
        verdict: those of a theme (``theme``, of :meth:`themes` for ``outcome``), or the given ``pair_ids``, or
        the first pairs with that outcome."""
        if theme is not None:
            found = [t for t in self.themes(outcome=outcome) if t["id"] == theme]
            if not found:
                raise ValueError(f"no theme {theme} among the {outcome!r} themes")
            pair_ids = found[0]["members"]
        if pair_ids is None:
            pair_ids = [p for p, _ in self._reasons(outcome)]
        wanted = pair_ids[:limit]
        if not wanted:
            return []
        verdicts = to_arrow(
            self.con.sql(
                "SELECT pair_id, conversation_id, turn_index, stratum, stage, outcome, severity, summary, reasoning "
                f"FROM verdicts WHERE pair_id IN ({', '.join('?' * len(wanted))})",
                params=wanted,
            )
        ).to_pylist()
        replays = to_arrow(
            self.con.sql(
                "SELECT pair_id, side, steps, final_text, hit_tool_cap, error FROM replays "
                f"WHERE pair_id IN ({', '.join('?' * len(wanted))})",
                params=wanted,
            )
        ).to_pylist()
        session = self.result.manifest.config.get("mode") == "session"
        sides: dict[str, dict[str, Any]] = {}
        for r in replays:
            calls = [f"{c['name']}({c['arguments']})" for step in r["steps"] or [] for c in step["tool_calls"] or []]
            sides.setdefault(r["pair_id"], {})[r["side"]] = {
                "calls": calls,
                "text": r["final_text"],
                "hit_tool_cap": r["hit_tool_cap"],
                "error": r["error"],
                # A session's whole transcript, each user message and tool result with its source.
                **({"transcript": transcript_entries(r["steps"] or [])} if session else {}),
            }
        by_id = {v["pair_id"]: v for v in verdicts}
        asked = self._user_messages(verdicts)
        return [{**by_id[p], "user": asked.get(p), "session": session, **sides.get(p, {})}
                for p in wanted if p in by_id]  # fmt: skip

    def _user_messages(self, verdicts: list[dict[str, Any]]) -> dict[str, str | None]:
        """Each pair's last user message before its turn (as text, media as placeholders), from the stored
        conversations: what the two sides were answering."""
        ids = sorted({v["conversation_id"] for v in verdicts})
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        table = to_arrow(self.con.sql(f"SELECT * FROM conversations WHERE conversation_id IN ({marks})", params=ids))
        asked: dict[tuple[str, int], str | None] = {}  # (conversation, turn) -> its last user message
        for row in table.to_pylist():
            conversation = TABLES["conversations"].parse(row).conversation()
            for point in replay_points(conversation, greetings=True):  # every turn once, however many pairs
                # from the end: the user message a turn answers is close before it (a long context is not read)
                user = next((m for m in reversed(point.context) if m.role == "user"), None)
                asked[(conversation.id, point.turn_index)] = user.text_with_media() if user is not None else None
        return {v["pair_id"]: asked.get((v["conversation_id"], int(v["turn_index"]))) for v in verdicts}


def saved_themes(run: str | Path | RunResult) -> dict[str, list[dict[str, Any]]]:
    """The themes an analysis of the run saved (:meth:`Analysis.themes`), by outcome, without computing or
    writing anything: none when no analysis ran, or when the run changed since (its cache is stale). Where several
    were saved for an outcome (other ``k`` or names), the newest."""
    result = run if isinstance(run, RunResult) else open_result(run)
    cache = result.analysis_dir
    try:
        stamp = json.loads((cache / "stamp.json").read_text(encoding="utf-8")).get("stamp")
    except (OSError, ValueError, AttributeError):
        return {}
    m = result.manifest
    if stamp != f"{m.batches}:{m.counts.pairs}:{m.ended_at}":  # as Analysis._stamp
        return {}
    newest: dict[str, tuple[float, Path]] = {}
    for path in cache.glob("themes-*.json"):
        outcome = path.name.removeprefix("themes-").split("-", 1)[0]
        mtime = path.stat().st_mtime
        if outcome not in newest or mtime > newest[outcome][0]:
            newest[outcome] = (mtime, path)
    out: dict[str, list[dict[str, Any]]] = {}
    for outcome, (_, path) in sorted(newest.items()):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, list):
            out[outcome] = [t for t in data if isinstance(t, dict)]
    return out
