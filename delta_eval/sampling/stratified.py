"""Stratified sampling with proportional (or Neyman) allocation, executed in DuckDB SQL.

The population is one row per conversation (id, position, metadata, stratum columns). Each stratum ``h`` of size
``N_h`` gets ``n_h`` draws by proportional allocation (largest remainder, so the sizes add up to ``n`` exactly, with
at least ``min_per_stratum`` where the stratum has that many); inside a stratum, conversations are ordered by
``md5(seed:id)`` and the first ``n_h`` are taken, so a sample is reproducible across machines and DuckDB versions,
and growing ``n`` only adds conversations. Every sampled conversation carries its stratum weight ``N_h / n_h``, so
estimates can be reweighted to the population.

Example:
    >>> allocate({"a": 80, "b": 15, "c": 5}, n=10)
    {'a': 8, 'b': 1, 'c': 1}
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from delta_eval.allocation import allocate
from delta_eval.callables import callable_name, resolve_callable
from delta_eval.duckdb_connect import connect
from delta_eval.exceptions import ConfigError, SampleWarning
from delta_eval.schema import Conversation, Stratum
from delta_eval.sql import quote_ident

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "PRESENT_FIELDS",
    "DerivedStratum",
    "SampleResult",
    "Stratified",
    "allocate",
    "draw_sample",
    "present_fields",
]

StratumFunction = Callable[[Conversation], Any]
DerivedStratum = str | StratumFunction


class Stratified(BaseModel):
    """How to sample conversations: stratify by ``by`` and draw ``n`` in proportion to each stratum's size.

    ``by`` names metadata fields or entries of ``derived``. A derived stratum is a SQL expression over the population
    table (metadata fields are VARCHAR columns; ``metadata`` is the whole record as JSON), a Python function of the
    :class:`Conversation`, or, in a config file, ``{function = "module:function"}``.

    ``where`` keeps only the conversations a SQL condition over the same table holds for, before anything is
    counted: the population is what passes it (for recent traffic, e.g.
    ``CAST(created_at AS TIMESTAMP) >= now() - INTERVAL 7 DAY``).

    Allocation is proportional to stratum sizes, with at least ``min_per_stratum`` per stratum; with
    ``stratum_sd`` (per-stratum standard deviations, from a pilot: ``de.plan(pilot).stratum_sd``) it is Neyman's,
    more draws where outcomes vary more. Weights ``N_h / n_h`` keep weighted estimates unbiased either way.

    Example:
        >>> Stratified(by=["reward"], n=100, seed=7).n
        100
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    by: tuple[str, ...] = ()
    n: int | None = Field(default=None, ge=1)
    seed: int = 0
    min_per_stratum: int = Field(default=1, ge=0)
    stratum_sd: dict[str, float] = Field(default_factory=dict)
    derived: dict[str, DerivedStratum] = Field(default_factory=dict)
    where: str | None = None

    @field_validator("derived", mode="before")
    @classmethod
    def _functions_from_tables(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for name, spec in value.items():
                if isinstance(spec, Mapping):
                    if "sql" in spec:
                        out[name] = str(spec["sql"])
                    elif "function" in spec:
                        out[name] = resolve_callable(str(spec["function"]), f"derived stratum {name!r}")
                    else:
                        raise ValueError(f"derived stratum {name!r} needs 'sql' or 'function'")
                else:
                    out[name] = spec
            return out
        return value

    @field_serializer("derived")
    def _derived_names(self, value: dict[str, DerivedStratum]) -> dict[str, Any]:
        return {k: v if isinstance(v, str) else {"function": callable_name(v)} for k, v in value.items()}

    def python_strata(self) -> dict[str, StratumFunction]:
        """The derived strata computed in Python, by name."""
        return {k: v for k, v in self.derived.items() if callable(v) and not isinstance(v, str)}

    def sql_strata(self) -> dict[str, str]:
        """The derived strata computed in SQL, by name."""
        return {k: v for k, v in self.derived.items() if isinstance(v, str)}


class SampleResult(BaseModel):
    """Which conversations were drawn (position -> stratum and weight), the strata table, the population size,
    how many conversations the ``where`` condition left out, and ``notes``: what the run should say about the
    sample (a stratum field missing from most conversations)."""

    model_config = ConfigDict(frozen=True)

    selected: dict[int, tuple[str, float]]
    strata: tuple[Stratum, ...]
    population: int
    excluded: int = 0
    notes: tuple[str, ...] = ()


#: The population table's schema metadata key listing the metadata fields its conversations have (JSON), kept as
#: columns or not (see :mod:`delta_eval.sampling.population`).
PRESENT_FIELDS = b"delta_eval.present_fields"


def present_fields(population: pa.Table) -> set[str]:
    """The metadata fields some conversation of the population has (a value that is not null), whether the table
    keeps them as columns or not."""
    listed = (population.schema.metadata or {}).get(PRESENT_FIELDS)
    return set(json.loads(listed)) if listed is not None else set()


#: Columns of the population table that are not fields to stratify by.
_NOT_FIELDS = {"position", "conversation_id", "metadata"}


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _stratum_sql(spec: Stratified, columns: set[str], present: set[str]) -> tuple[str, list[str]]:
    """The SQL expression of a conversation's stratum, and the values it binds: each name is bound as a value and
    quoted as a column (:func:`~delta_eval.sql.quote_ident`), so no name can change the statement. ``present``
    names the metadata fields the population has but does not keep (an unknown name's error suggests them too)."""
    if not spec.by:
        return "'all'", []
    parts = []
    params = []
    for name in spec.by:
        if name not in columns:
            known = (columns | present) - _NOT_FIELDS
            raise ConfigError(
                f"stratum {name!r} is neither a metadata field nor a derived stratum (known: "
                f"{', '.join(sorted(known)) or 'none'}){_did_you_mean(name, known)}"
            )
        parts.append(f"? || coalesce(CAST({quote_ident(name)} AS VARCHAR), '(missing)')")
        params.append(f"{name}=")
    return " || ', ' || ".join(parts), params


def _check_fields(spec: Stratified, con: Any, types: dict[str, str], elsewhere: set[str]) -> list[str]:
    """Refuse a stratum field missing (or null) in every conversation of the population, and say which are missing
    from most: either puts (nearly) every conversation in one ``(missing)`` stratum, as a misspelt field name or
    mapping path does, and the sample would quietly stop being stratified. Derived strata are left alone (a SQL
    ``CASE`` without ``ELSE`` is empty on purpose). ``elsewhere``: the fields conversations have that the population
    does not keep as columns (suggested too)."""
    # Metadata fields are the VARCHAR columns that are not derived strata (counters and n_messages are integers).
    candidates = sorted(c for c, t in types.items() if t == "VARCHAR" and c not in _NOT_FIELDS | set(spec.derived))
    fields = [name for name in dict.fromkeys(spec.by) if name in candidates]
    if not fields:
        return []
    counted = ", ".join(f"count({quote_ident(c)})" for c in candidates)  # count(x): the rows where x is not NULL
    total, *present = con.execute(f"SELECT count(*), {counted} FROM population").fetchone()
    if total == 0:
        return []
    have = dict(zip(candidates, present, strict=True))
    known = {c for c, n in have.items() if n and c not in fields} | (elsewhere - set(types) - set(fields))
    notes = []
    for name in fields:
        missing = total - have[name]
        if missing == total:
            raise ConfigError(
                f"stratum field {name!r} is missing from all {total} conversations, which would all fall in one "
                f"'(missing)' stratum (fields present: {', '.join(sorted(known)) or 'none'})"
                + _did_you_mean(name, known)
            )
        if 2 * missing > total:
            note = (
                f"stratum field {name!r} is missing from {missing} of {total} conversations, which fall in its "
                f"'(missing)' stratum{_did_you_mean(name, known)}"
            )
            warnings.warn(note, SampleWarning, stacklevel=3)
            notes.append(note)
    return notes


def draw_sample(population: pa.Table, spec: Stratified) -> SampleResult:
    """Draw the sample from a population table (``position``, ``conversation_id``, ``metadata`` and strata columns).

    SQL-derived strata are evaluated here, in DuckDB; a SQL error is a :class:`ConfigError` naming the stratum. A
    metadata field of ``by`` that no conversation of the population has is a :class:`ConfigError` too (naming the
    fields present, and the close matches); one missing from more than half of them is a :class:`SampleWarning`,
    kept in the result's ``notes``.
    """
    if population.num_rows and _takes_everything(spec, population.num_rows):
        return _everything(population)
    # Here, not at the top: a run's configuration holds a Stratified and loads without the data engines.
    import duckdb
    import pyarrow as pa

    con = connect()
    try:
        # Views over the Arrow table, not copies of it: DuckDB reads the population where it is, once, for the
        # strata (each copy held the whole table again, and memory grew with the source).
        con.register("population_raw", population)
        select = ["*"]
        for name, expr in spec.sql_strata().items():
            select.append(f"({expr}) AS {quote_ident(name)}")
        sql_strata = [quote_ident(name) for name in spec.sql_strata()]
        try:
            con.execute(f"CREATE VIEW derived AS SELECT {', '.join(select)} FROM population_raw")
            if sql_strata:  # evaluated here, so that a failing expression is said to be the stratum's
                con.execute(f"SELECT {', '.join(f'count({c})' for c in sql_strata)} FROM derived").fetchall()
        except duckdb.Error as exc:
            raise ConfigError(f"a derived stratum's SQL failed: {exc}") from None
        try:
            con.execute(f"CREATE VIEW population AS SELECT * FROM derived WHERE {spec.where or 'true'}")
            kept = con.execute("SELECT count(*) FROM population").fetchone()
        except duckdb.Error as exc:
            raise ConfigError(f"the sample's 'where' condition failed: {exc}") from None
        excluded = population.num_rows - (kept[0] if kept else 0)
        types = {row[0]: row[1] for row in con.execute("DESCRIBE population").fetchall()}
        fields = present_fields(population)
        key, params = _stratum_sql(spec, set(types), fields)
        notes = _check_fields(spec, con, types, fields)
        con.execute(f"CREATE TABLE keyed AS SELECT position, conversation_id, {key} AS stratum FROM population", params)
        counts = dict(con.execute("SELECT stratum, count(*) FROM keyed GROUP BY stratum").fetchall())
        alloc = allocate(counts, spec.n, spec.min_per_stratum, spec.stratum_sd or None)
        con.register(
            "allocation",
            pa.table({"stratum": list(alloc), "n_h": list(alloc.values())}),
        )
        rows = con.execute(
            """
            SELECT position, stratum FROM (
                SELECT k.position, k.stratum, a.n_h,
                       row_number() OVER (PARTITION BY k.stratum ORDER BY md5(? || ':' || k.conversation_id)) AS rank
                FROM keyed k JOIN allocation a USING (stratum)
            ) WHERE rank <= n_h
            ORDER BY position
            """,
            [str(spec.seed)],
        ).fetchall()
    finally:
        con.close()
    strata = tuple(
        Stratum(
            stratum=h,
            population=counts[h],
            sampled=alloc[h],
            weight=counts[h] / alloc[h] if alloc[h] else 0.0,
        )
        for h in sorted(counts)
    )
    weights = {row.stratum: row.weight for row in strata}
    selected = {int(pos): (h, weights[h]) for pos, h in rows}
    return SampleResult(
        selected=selected, strata=strata, population=sum(counts.values()), excluded=excluded, notes=tuple(notes)
    )


def _takes_everything(spec: Stratified, size: int) -> bool:
    """Whether ``spec`` draws every conversation of a population of ``size`` into one stratum: no strata, no
    derived stratum to evaluate, no ``where``, and no ``n`` below the size."""
    return not spec.by and not spec.derived and spec.where is None and (spec.n is None or spec.n >= size)


def _everything(population: pa.Table) -> SampleResult:
    """The sample :func:`draw_sample` draws in SQL when the spec takes everything (:func:`_takes_everything`): every
    conversation in the one stratum ``all``, of weight 1. Without DuckDB, whose start (~0.1 s) and queries were
    most of a run's sampling when it replays its whole source."""
    n = population.num_rows
    return SampleResult(
        selected={int(position): ("all", 1.0) for position in population["position"].to_pylist()},
        strata=(Stratum(stratum="all", population=n, sampled=n, weight=1.0),),
        population=n,
    )
