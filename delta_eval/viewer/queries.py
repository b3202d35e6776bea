"""The viewer's reads of one run folder, all through DuckDB with bound parameters.

At start the run's pairs are gathered once into an in-memory table, ``pair_index`` (see
:mod:`delta_eval.analysis.pair_filter`: one row per pair with what the pair list shows, filters and sorts by, stored
in the list's default order); a page of the list is one scan of it. A pair's own page reads the Parquet views (a
handful of rows by ``pair_id``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delta_eval.analysis.analyze import saved_themes
from delta_eval.analysis.pair_filter import FILTERS, FLAGS, LIST_COLUMNS, SORTS, PairFilter, create_index
from delta_eval.analysis.themes import section_label
from delta_eval.metrics import Decision
from delta_eval.replay.points import point_at
from delta_eval.replay.session import session_point
from delta_eval.result import RunResult
from delta_eval.store.labels import latest_labels
from delta_eval.store.tables import TABLES

__all__ = ["FILTERS", "FLAGS", "PAGE_SIZE", "SEARCH_CAP", "SORTS", "Page", "PairFilter", "RunView"]

#: Rows a page of the pair list shows.
PAGE_SIZE = 50
#: A text search counts its matches up to this many (then the list says "more than" and shows these).
SEARCH_CAP = 10_000


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

    def __init__(self, path: str | Path, candidate: str | None = None) -> None:
        self.result = RunResult(path, candidate)
        self.path = self.result.path
        #: What the viewer calls it: the folder's name, and the candidate's in a run of several.
        self.name = self.path.name if self.result.candidate is None else f"{self.path.name} · {self.result.candidate}"
        self._con = self.result.connect()
        saved = saved_themes(self.result)
        self.pairs = create_index(self._con, saved)
        #: A theme's prompt section, how the candidate changed it and how sure the attribution is, by filter value
        #: (:func:`~delta_eval.analysis.themes.section_label`).
        self.theme_sections = {
            f"{outcome}: {theme.get('name') or theme.get('id')}": section_label(theme)
            for outcome, themes in saved.items()
            for theme in themes
            if theme.get("section")
        }
        self._lock = threading.Lock()
        self._decision: Decision | None = None
        self._facets: dict[str, list[tuple[str, int]]] | None = None

    @classmethod
    def all_of(cls, path: str | Path) -> list[RunView]:
        """A view of the run folder, or one view per candidate in a run of several (each its pairs against the
        baseline, listed side by side like runs)."""
        candidates = RunResult(path).candidates
        return [cls(path, c) for c in candidates] if candidates else [cls(path)]

    def own_pair_id(self, point_id: str) -> str:
        """This view's pair id of a turn (``conversation#turn``): itself, or ``...~name`` for a candidate of several."""
        return point_id if self.result.candidate is None else f"{point_id}~{self.result.candidate}"

    @contextmanager
    def cursor(self) -> Iterator[Any]:
        """The run's database, for one request at a time: requests run in threads, and a DuckDB connection runs
        one statement at a time (a cursor of it would not see the empty datasets the views register on it)."""
        with self._lock:
            yield self._con

    def decision(self) -> Decision:
        """The run's decision under its own rule, computed once (in DuckDB over the run's files: any size)."""
        if self._decision is None:
            with self.cursor() as con:
                self._decision = self.result.decision(con=con)
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
                f"SELECT {LIST_COLUMNS} FROM pair_index WHERE {where}{_order(f)} LIMIT ? OFFSET ?",
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
                f"SELECT {LIST_COLUMNS} FROM pair_index WHERE seq BETWEEN ? AND ? "
                "AND seq IN (SELECT unnest(?::BIGINT[])) ORDER BY seq",
                [min(wanted), max(wanted), wanted],
            )
        else:
            rel = cur.execute(
                f"SELECT {LIST_COLUMNS} FROM pair_index WHERE seq IN (SELECT unnest(?::BIGINT[])) "
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
        and the replayed turn's context and tools, or a session's opening (``session``; ``None`` when the run has
        no such pair)."""
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
        stored = TABLES["conversations"].parse(conversation[0]) if conversation else None
        session = self.is_session
        point = None
        if stored is not None:
            # A session's point is its opening; a turn's, the recorded context before it.
            start = int((self.result.manifest.config.get("session") or {}).get("start", 1))
            whole = stored.conversation()
            point = session_point(whole, start) if session else point_at(whole, int(verdict["turn_index"]))
        for j in judgements:
            j["raw"] = _json(j.get("raw"))
        return {
            "verdict": verdict,
            "details": _json(verdict.get("details")),
            "sides": {side: TABLES["replays"].parse(r) for side, r in replays.items()},
            "replay_rows": replays,
            "judgements": judgements,
            "point": point,
            "session": session,
            "labels": self.labels(pair_id),
        }

    @property
    def is_session(self) -> bool:
        """Whether the run rolled whole sessions (``mode="session"``): a pair is a session, not a turn."""
        return self.result.manifest.config.get("mode") == "session"

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
