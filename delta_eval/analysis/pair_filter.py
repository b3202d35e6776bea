"""Which pairs a person asked for: filters on the run's pairs (outcome, stage, stratum, severity, failed side,
flags, tools, themes, text), a sort, a page, and the SQL that answers them over ``pair_index``, a narrow table of one
row per pair built once from the run's Parquet views. The viewer's pair list and the static report's "pairs behind
each gate" read pairs through it, so a link in one and a list in the other mean the same pairs.

The Parquet views join three replays to each verdict and unnest tool calls, which is fine for one query and too
slow for every page of a list of a million pairs; the index makes a page one scan of a narrow table with
``LIMIT``/``OFFSET``. Only column names chosen from the fixed tables below ever enter a statement's text; every value
a person typed is bound as a parameter.

Example:
    >>> f = PairFilter.from_query({"outcome": ["baseline"], "q": ["refund"]})
    >>> where, params = f.where()
    >>> print(where)
    outcome IN (?) AND contains(search, lower(?))
    >>> params
    ['baseline', 'refund']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

__all__ = ["FILTERS", "FLAGS", "LIST_COLUMNS", "PAIR_INDEX_SQL", "SORTS", "PairFilter", "create_index"]

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

#: The pair index (see the module docstring): one row per pair, in the list's default order (``seq``).
PAIR_INDEX_SQL = """
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
#: The columns a row of the pair list shows.
LIST_COLUMNS = (
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


def create_index(con: Any, themes: Mapping[str, Sequence[Mapping[str, Any]]]) -> int:
    """Build ``pair_index`` and ``pair_themes`` (each theme's member pairs, named ``"{outcome}: {name}"``) on a run's
    DuckDB connection, from its views and the ``themes`` an analysis saved (by outcome); the number of pairs."""
    con.execute(PAIR_INDEX_SQL)
    rows = [
        (pair_id, f"{outcome}: {theme.get('name') or theme.get('id')}")
        for outcome, found in themes.items()
        for theme in found
        for pair_id in theme.get("members") or ()
    ]
    con.execute("CREATE TABLE pair_themes (pair_id VARCHAR, theme VARCHAR)")
    if rows:
        con.executemany("INSERT INTO pair_themes VALUES (?, ?)", rows)
    # fetchall, never fetchone: a result left half-read keeps a DuckDB connection busy for the next statement
    ((pairs,),) = con.execute("SELECT count(*) FROM pair_index").fetchall()
    return int(pairs)
