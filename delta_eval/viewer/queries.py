"""The viewer's reads of one run folder, all through DuckDB with bound parameters.

At start the run's pairs are gathered once into an in-memory table, ``pair_index``: one row per pair with what the
pair list shows, filters and sorts by (the verdict's columns, each side's text, latency, cost, tool names and
check flags, and one lower-cased text to search), stored in the list's default order. The Parquet views join
three replays to each verdict and unnest tool calls, which is fine for one query and too slow for every page of a
list of a million pairs; the index makes a page one scan of a narrow table with ``LIMIT``/``OFFSET``. A pair's
own page reads the Parquet views (a handful of rows by ``pair_id``).

Only column names chosen from the fixed tables below ever enter a statement's text; every value a person typed is
bound as a parameter.

Example:
    >>> f = PairFilter.from_query({"outcome": ["baseline"], "q": ["refund"]})
    >>> where, params = f.where()
    >>> print(where)
    outcome IN (?) AND contains(search, lower(?))
    >>> params
    ['baseline', 'refund']
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from delta_eval.analysis.analyze import DECISION_MAX_PAIRS, saved_themes
from delta_eval.analysis.themes import section_label
from delta_eval.metrics import Decision
from delta_eval.replay.points import replay_points
from delta_eval.result import RunResult
from delta_eval.schema import Conversation, ReplayPoint
from delta_eval.store.labels import latest_labels
from delta_eval.store.tables import TABLES

__all__ = ["FILTERS", "PAGE_SIZE", "SEARCH_CAP", "SORTS", "Page", "PairFilter", "RunView"]

#: Rows a page of the pair list shows.
PAGE_SIZE = 50
#: A text search counts its matches up to this many (then the list says "more than" and shows these).
SEARCH_CAP = 10_000
#: The list filters: query parameter -> the index column it matches (a parameter may be given several times: any of
#: the values matches).
FILTERS: dict[str, str] = {
    "outcome": "outcome",
    "stage": "stage",
    "stratum": "stratum",
    "severity": "severity",
    "failed": "error_side",
}
#: Flags a pair can be filtered on (either side showed it): query value -> the index column.
FLAGS: dict[str, str] = {
    "invalid_tool_calls": "invalid_tool_calls",
    "text_instead_of_action": "text_instead_of_action",
    "no_decision": "no_decision",
    "hit_tool_cap": "hit_tool_cap",
    "replay_error": "replay_error",
}
#: Sort keys: query value -> the ORDER BY expression (constants only).
SORTS: dict[str, str] = {
    "turn": "seq {d}",
    "pair": "pair_id {d}",
    "outcome": "outcome {d}, pair_id",
    "stage": "stage {d}, pair_id",
    "stratum": "stratum {d}, pair_id",
    "severity": "severity {d} NULLS LAST, pair_id",
    "preference": "preference {d} NULLS LAST, pair_id",
    "confidence": "confidence {d} NULLS LAST, pair_id",
    "candidate_latency": "candidate_latency_ms {d} NULLS LAST, pair_id",
    "baseline_latency": "baseline_latency_ms {d} NULLS LAST, pair_id",
    "candidate_cost": "candidate_cost_usd {d} NULLS LAST, pair_id",
    "baseline_cost": "baseline_cost_usd {d} NULLS LAST, pair_id",
}

_INDEX = """
CREATE TABLE pair_index AS
WITH sides AS (
    SELECT pair_id, side, final_text, latency_ms, cost_usd, invalid_tool_calls, text_instead_of_action,
           no_decision, hit_tool_cap, error,
           flatten(list_transform(steps, lambda s: list_transform(s.tool_calls, lambda c: c.name))) AS tools
    FROM replays WHERE side IN ('baseline', 'candidate')
), per_pair AS (
    SELECT pair_id,
           any_value(final_text) FILTER (WHERE side = 'baseline') AS baseline_full,
           any_value(final_text) FILTER (WHERE side = 'candidate') AS candidate_full,
           any_value(latency_ms) FILTER (WHERE side = 'baseline') AS baseline_latency_ms,
           any_value(latency_ms) FILTER (WHERE side = 'candidate') AS candidate_latency_ms,
           any_value(cost_usd) FILTER (WHERE side = 'baseline') AS baseline_cost_usd,
           any_value(cost_usd) FILTER (WHERE side = 'candidate') AS candidate_cost_usd,
           list_distinct(flatten(list(tools))) AS tools,
           coalesce(bool_or(invalid_tool_calls > 0), false) AS invalid_tool_calls,
           coalesce(bool_or(text_instead_of_action), false) AS text_instead_of_action,
           coalesce(bool_or(no_decision), false) AS no_decision,
           coalesce(bool_or(hit_tool_cap), false) AS hit_tool_cap,
           coalesce(bool_or(error IS NOT NULL), false) AS replay_error
    FROM sides GROUP BY pair_id
)
SELECT row_number() OVER (ORDER BY v.conversation_id, v.turn_index, v.epoch, v.pair_id) AS seq,
       v.pair_id, v.conversation_id, v.turn_index, v.epoch, v.stage, v.outcome, v.stratum, v.severity,
       v.error_side, v.preference, v.confidence, left(v.summary, 300) AS summary,
       left(p.baseline_full, 160) AS baseline_text, left(p.candidate_full, 160) AS candidate_text,
       p.* EXCLUDE (pair_id, baseline_full, candidate_full),
       lower(concat_ws(chr(10), v.pair_id, v.summary, p.baseline_full, p.candidate_full)) AS search
FROM verdicts v LEFT JOIN per_pair p USING (pair_id)
ORDER BY seq
"""
_LIST_COLUMNS = (
    "pair_id, conversation_id, turn_index, epoch, stage, outcome, stratum, severity, error_side, preference, "
    "confidence, summary, baseline_text, candidate_text, baseline_latency_ms, candidate_latency_ms, "
    "baseline_cost_usd, candidate_cost_usd, tools"
)


@dataclass(frozen=True)
class PairFilter:
    """What the pair list shows: the filters a person chose, the text searched, the sort and the page."""

    values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    themes: tuple[str, ...] = ()
    q: str = ""
    sort: str = "turn"
    desc: bool = False
    page: int = 1

    @classmethod
    def from_query(cls, query: Mapping[str, Sequence[str]]) -> PairFilter:
        """The filter of a URL's query (parameter -> its values); unknown parameters and sort keys are ignored."""

        def many(name: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(v for v in query.get(name, ()) if v != ""))

        def one(name: str, default: str = "") -> str:
            got = [v for v in query.get(name, ()) if v != ""]
            return got[-1] if got else default

        try:
            page = max(1, int(one("page", "1")))
        except ValueError:
            page = 1
        sort = one("sort", "turn")
        return cls(
            values={k: many(k) for k in FILTERS if many(k)},
            flags=tuple(f for f in many("flag") if f in FLAGS),
            tools=many("tool"),
            themes=many("theme"),
            q=one("q").strip(),
            sort=sort if sort in SORTS else "turn",
            desc=one("dir") == "desc",
            page=page,
        )

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition on ``pair_index`` (``TRUE`` for no filter) and its bound parameters."""
        parts: list[str] = []
        params: list[Any] = []
        for name, values in self.values.items():
            column = FILTERS[name]
            # "none" stands for a missing value (no severity, no failed side), which IN never matches
            wanted = [v for v in values if v != "none"]
            alternatives = [f"{column} IN ({', '.join('?' * len(wanted))})"] if wanted else []
            if len(wanted) < len(values):
                alternatives.append(
                    f"{column} IS NULL" if name != "severity" else "coalesce(severity, 'none') = 'none'"
                )
            parts.append("(" + " OR ".join(alternatives) + ")" if len(alternatives) > 1 else alternatives[0])
            params += wanted
        parts += [FLAGS[f] for f in self.flags]
        if self.tools:
            parts.append(f"list_has_any(tools, [{', '.join('?' * len(self.tools))}]::VARCHAR[])")
            params += list(self.tools)
        if self.themes:
            marks = ", ".join("?" * len(self.themes))
            parts.append(f"pair_id IN (SELECT pair_id FROM pair_themes WHERE theme IN ({marks}))")
            params += list(self.themes)
        if self.q:
            # one lower-cased column of the pair's id, summary and both full texts: a substring test on it is one
            # fast scan, where ILIKE on four columns folds case row by row
            parts.append("contains(search, lower(?))")
            params.append(self.q)
        return (" AND ".join(parts) or "TRUE"), params

    def order_by(self) -> str:
        """The ORDER BY clause of the sort (built from :data:`SORTS` only)."""
        return SORTS[self.sort].format(d="DESC" if self.desc else "ASC")

    def query(self, **changes: Any) -> str:
        """This filter as a URL query string, with ``changes`` (``page=2``, ``sort="preference"``) applied."""
        state: dict[str, Any] = {
            **{k: list(v) for k, v in self.values.items()},
            "flag": list(self.flags),
            "tool": list(self.tools),
            "theme": list(self.themes),
            "q": self.q,
            "sort": self.sort if self.sort != "turn" else "",
            "dir": "desc" if self.desc else "",
            "page": self.page if self.page != 1 else "",
        }
        state.update(changes)
        pairs = [
            (k, v) for k, vs in state.items() for v in (vs if isinstance(vs, list) else [vs]) if v not in ("", None)
        ]
        return urlencode(pairs)


@dataclass(frozen=True)
class Page:
    """One page of the pair list: its rows, the number of pairs the filter matches, and where it is. ``capped``:
    a text search matched more than :data:`SEARCH_CAP` pairs, ``total`` is the cap and the pages cover those."""

    rows: list[dict[str, Any]]
    total: int
    page: int
    pages: int
    offset: int
    capped: bool = False


class RunView:
    """One run folder as the viewer reads it: the pair index, the decision, a pair's detail, the labels."""

    def __init__(self, path: str | Path) -> None:
        self.result = RunResult(path)
        self.path = self.result.path
        self.name = self.path.name
        self._con = self.result.connect()
        self._con.execute(_INDEX)
        self._themes()
        self._lock = threading.Lock()
        self._decision: Decision | None = None
        self._facets: dict[str, list[tuple[str, int]]] | None = None
        # fetchall, never fetchone: a result left half-read keeps a DuckDB connection busy for the next statement
        ((pairs,),) = self._con.execute("SELECT count(*) FROM pair_index").fetchall()
        self.pairs = int(pairs)

    def _themes(self) -> None:
        """The themes the analysis saved (``delta-eval analyze``), as (pair, theme) rows: none until it ran; and
        each theme's prompt section in words (:func:`~delta_eval.analysis.themes.section_label`), by theme."""
        saved = saved_themes(self.path)
        #: A theme's prompt section, how the candidate changed it and how sure the attribution is, by filter value.
        self.theme_sections = {
            f"{outcome}: {theme.get('name') or theme.get('id')}": section_label(theme)
            for outcome, themes in saved.items()
            for theme in themes
            if theme.get("section")
        }
        rows = [
            (pair_id, f"{outcome}: {theme.get('name') or theme.get('id')}")
            for outcome, themes in saved.items()
            for theme in themes
            for pair_id in theme.get("members") or ()
        ]
        self._con.execute("CREATE TABLE pair_themes (pair_id VARCHAR, theme VARCHAR)")
        if rows:
            self._con.executemany("INSERT INTO pair_themes VALUES (?, ?)", rows)

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """The run's database, for one request at a time: requests run in threads, and a DuckDB connection runs
        one statement at a time (a cursor of it would not see the empty datasets the views register on it)."""
        with self._lock:
            yield self._con

    def decision(self, *, compute: bool | None = None) -> Decision | None:
        """The run's decision under its own rule, computed once. It reads every pair into memory, so by default
        only up to :data:`~delta_eval.analysis.analyze.DECISION_MAX_PAIRS` pairs (``compute=True``: whatever the
        size); ``None`` when not computed."""
        if compute is None:
            compute = self.pairs <= DECISION_MAX_PAIRS
        if self._decision is None and compute:
            self._decision = self.result.decision()
        return self._decision

    def facets(self) -> dict[str, list[tuple[str, int]]]:
        """Every value each filter can take, with its number of pairs in the run, for the filter form (computed
        once: the run does not change under the viewer)."""
        if self._facets is None:
            self._facets = self._count_facets()
        return self._facets

    def _count_facets(self) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = {}
        with self.cursor() as cur:
            for name, column in FILTERS.items():
                rows = cur.execute(
                    f"SELECT coalesce({column}, 'none') AS v, count(*) FROM pair_index GROUP BY v ORDER BY v"
                ).fetchall()
                out[name] = [(str(v), int(n)) for v, n in rows]
            out["tool"] = [
                (str(v), int(n))
                for v, n in cur.execute(
                    "SELECT t, count(*) FROM (SELECT unnest(tools) AS t FROM pair_index) GROUP BY t ORDER BY t"
                ).fetchall()
            ]
            out["theme"] = [
                (str(v), int(n))
                for v, n in cur.execute(
                    "SELECT theme, count(*) FROM pair_themes GROUP BY theme ORDER BY theme"
                ).fetchall()
            ]
            (flags,) = cur.execute(
                "SELECT " + ", ".join(f"count(*) FILTER (WHERE {c})" for c in FLAGS.values()) + " FROM pair_index"
            ).fetchall()
            out["flag"] = [(name, int(n)) for name, n in zip(FLAGS, flags, strict=True)]
        return out

    def page(self, f: PairFilter, size: int = PAGE_SIZE) -> Page:
        """The page of the pair list ``f`` asks for (``LIMIT``/``OFFSET`` over the sorted, filtered index)."""
        where, params = f.where()
        with self.cursor() as cur:
            if f.q:
                return self._search_page(cur, f, where, params, size)
            if where == "TRUE":
                total = self.pairs
            else:
                ((found,),) = cur.execute(f"SELECT count(*) FROM pair_index WHERE {where}", params).fetchall()
                total = int(found)
            page, pages, offset = _place(f.page, total, size)
            rel = cur.execute(
                f"SELECT {_LIST_COLUMNS} FROM pair_index WHERE {where}{_order(f)} LIMIT ? OFFSET ?",
                [*params, size, offset],
            )
            return Page(rows=_dicts(rel), total=total, page=page, pages=pages, offset=offset)

    def _search_page(self, cur: Any, f: PairFilter, where: str, params: list[Any], size: int) -> Page:
        """A page of a text search in one scan of the searched text: the matching pairs' places (``seq``, up to
        :data:`SEARCH_CAP` of them, in the list's default order), then the page's rows fetched by place. A count
        and a page as two statements would scan every pair's text twice where the text is rare."""
        order = " ORDER BY seq" if f.themes else ""  # a join may reorder (see _order)
        seqs = [
            int(r[0])
            for r in cur.execute(
                f"SELECT seq FROM pair_index WHERE {where}{order} LIMIT ?", [*params, SEARCH_CAP + 1]
            ).fetchall()
        ]
        capped = len(seqs) > SEARCH_CAP
        seqs = seqs[:SEARCH_CAP]
        page, pages, offset = _place(f.page, len(seqs), size)
        if not seqs:
            return Page(rows=[], total=0, page=1, pages=1, offset=0)
        if f.sort == "turn" and not f.desc:
            wanted = seqs[offset : offset + size]
            # the BETWEEN lets DuckDB skip the row groups outside the page (the index is stored by seq)
            rel = cur.execute(
                f"SELECT {_LIST_COLUMNS} FROM pair_index WHERE seq BETWEEN ? AND ? "
                "AND seq IN (SELECT unnest(?::BIGINT[])) ORDER BY seq",
                [min(wanted), max(wanted), wanted],
            )
        else:
            rel = cur.execute(
                f"SELECT {_LIST_COLUMNS} FROM pair_index WHERE seq IN (SELECT unnest(?::BIGINT[])) "
                f"ORDER BY {f.order_by()} LIMIT ? OFFSET ?",
                [seqs, size, offset],
            )
        return Page(rows=_dicts(rel), total=len(seqs), page=page, pages=pages, offset=offset, capped=capped)

    def neighbours(self, f: PairFilter, pair_id: str, position: int) -> tuple[int, str | None, str | None]:
        """Where the pair is in the filtered, sorted list, and the pairs before and after it. ``position`` (0-based)
        is where the list said it was; when the pair is not there (a link from elsewhere, a list that changed), its
        place is found in the default order, and in another order it has no neighbours."""
        where, params = f.where()
        with self.cursor() as cur:
            around = self._around(cur, f, where, params, position)
            if around[1] != pair_id and f.sort == "turn" and not f.desc:
                found = cur.execute(
                    f"SELECT count(*) FILTER (WHERE seq < (SELECT seq FROM pair_index WHERE pair_id = ?)), "
                    f"count(*) FILTER (WHERE pair_id = ?) FROM pair_index WHERE {where}",
                    [pair_id, pair_id, *params],
                ).fetchall()
                ((before, here),) = found
                if here:
                    position = int(before)
                    around = self._around(cur, f, where, params, position)
        if around[1] != pair_id:
            return position, None, None
        return position, around[0], around[2]

    @staticmethod
    def _around(cur: Any, f: PairFilter, where: str, params: list[Any], position: int) -> list[str | None]:
        """The pair ids at ``position - 1``, ``position`` and ``position + 1`` of the list (``None`` past an end)."""
        start = max(position - 1, 0)
        rows = cur.execute(
            f"SELECT pair_id FROM pair_index WHERE {where}{_order(f)} LIMIT ? OFFSET ?",
            [*params, 3 if position > 0 else 2, start],
        ).fetchall()
        ids: list[str | None] = [str(r[0]) for r in rows]
        if position == 0:
            ids.insert(0, None)
        return ids + [None] * (3 - len(ids))

    def pair(self, pair_id: str) -> dict[str, Any] | None:
        """Everything about one pair: the verdict, each side's replay, every judge answer, the conversation so far
        and the replayed turn's context and tools (``None`` when the run has no such pair)."""
        with self.cursor() as cur:
            verdicts = _dicts(cur.execute("SELECT * FROM verdicts WHERE pair_id = ?", [pair_id]))
            if not verdicts:
                return None
            verdict = verdicts[0]
            replays = {r["side"]: r for r in _dicts(cur.execute("SELECT * FROM replays WHERE pair_id = ?", [pair_id]))}
            judgements = _dicts(
                cur.execute("SELECT * FROM judgements WHERE pair_id = ? ORDER BY answered_at", [pair_id])
            )
            conversations = cur.execute(
                "SELECT * FROM conversations WHERE conversation_id = ? LIMIT 1", [verdict["conversation_id"]]
            )
            conversation = _dicts(conversations)
        point = _point(conversation[0], int(verdict["turn_index"])) if conversation else None
        for j in judgements:
            j["raw"] = _json(j.get("raw"))
        return {
            "verdict": verdict,
            "details": _json(verdict.get("details")),
            "sides": {side: TABLES["replays"].parse(r) for side, r in replays.items()},
            "replay_rows": replays,
            "judgements": judgements,
            "point": point,
            "labels": self.labels(pair_id),
        }

    def labels(self, pair_id: str) -> list[dict[str, Any]]:
        """Each person's newest label of the pair."""
        table = latest_labels(self.path)
        return [r for r in table.to_pylist() if r["pair_id"] == pair_id]

    def close(self) -> None:
        """Close the run's database."""
        self._con.close()


def _place(asked: int, total: int, size: int) -> tuple[int, int, int]:
    """The page shown (the one asked for, or the last), the number of pages, and the page's first row."""
    pages = max(1, -(-total // size))
    page = min(asked, pages)
    return page, pages, (page - 1) * size


def _order(f: PairFilter) -> str:
    """The ORDER BY clause of a list query: none in the default order, which is the index's own (DuckDB keeps a
    table's insertion order in a scan, filter and LIMIT unless told otherwise): a deep page then costs a scan, not a
    sort of every row before it. A theme filter joins, and a join may reorder: then the order is said."""
    if f.sort == "turn" and not f.desc and not f.themes:
        return ""
    return f" ORDER BY {f.order_by()}"


def _dicts(rel: Any) -> list[dict[str, Any]]:
    columns = [d[0] for d in rel.description]
    return [dict(zip(columns, row, strict=True)) for row in rel.fetchall()]


def _json(text: Any) -> Any:
    if not isinstance(text, str) or not text:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _point(row: dict[str, Any], turn_index: int) -> ReplayPoint | None:
    """The replay point of the turn, rebuilt from the stored conversation the way the run built it: the context
    the sides were sent, the tools offered, the recorded turn."""
    sampled = TABLES["conversations"].parse(row)
    conversation = Conversation(
        id=sampled.conversation_id,
        messages=sampled.messages,
        tools=sampled.tools,
        metadata=sampled.metadata,
        source=sampled.source,
        record=sampled.record,
        calls=sampled.calls,
    )
    for point in replay_points(conversation, greetings=True):
        if point.turn_index == turn_index:
            return point
    return None
