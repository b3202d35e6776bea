"""What each side's replays used: input tokens, of which prompt-cache reads and writes, output tokens, dollars, and
the dollars prompt caching saved (what the same tokens would have cost with every input token at the full input
price, minus what they cost).

Unknown stays unknown: a side with one replay whose usage was not reported has ``None`` tokens, cost and savings,
never a partial sum; a model without a price has ``None`` dollars. The figures come from the ``replays`` table and
the run's prices (its ``prices`` override, then the built-in table), so they can be recomputed for any run folder.

Example::

    for s in side_spend(result.connect(), result.manifest.config.get("prices")):
        print(s.side, s.input_tokens, s.cache_read_tokens, s.saved_usd)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from delta_eval.pricing import Price, cost, price_for, total_cost
from delta_eval.schema import Usage

__all__ = ["SideSpend", "SpendRow", "side_spend", "spend_lines", "spend_rows"]


@dataclass(frozen=True)
class SideSpend:
    """One side's usage and dollars; ``None`` wherever some replay's usage (or its model's price) is unknown.

    ``input_tokens`` counts every prompt token; ``cache_read_tokens`` and ``cache_write_tokens`` are the part read
    from and written to the provider's prompt cache; ``cost_usd`` is what the replays cost; ``full_price_usd`` what
    they would have cost with no prompt cache; ``saved_usd`` the difference (negative when cache writes, priced
    above input by some providers, were never read back). ``unknown_usage`` counts replays without usage.
    """

    side: str
    replays: int
    unknown_usage: int
    input_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    full_price_usd: float | None
    saved_usd: float | None

    @property
    def read_share(self) -> float | None:
        """The share of input tokens billed as cache reads."""
        if self.input_tokens is None or self.cache_read_tokens is None or not self.input_tokens:
            return None
        return self.cache_read_tokens / self.input_tokens

    def as_dict(self) -> dict[str, Any]:
        """The figures as a plain dict (for a summary's JSON)."""
        return asdict(self)


class SpendRow(NamedTuple):
    """What the replays of one side and model add up to (see :func:`spend_rows`): sums are ``None`` where no replay
    has the column's value."""

    side: str
    model: str | None
    replays: int
    unknown_usage: int
    input_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None
    unpriced: int
    cost_usd: float | None
    hit_tool_cap: int | None
    tool_cap_known: int
    errors: int
    #: Whether the row adds up every model of its side (``model`` is then ``None``), not one model.
    whole_side: bool = False


_QUERY = """
    SELECT side, model, count(*), count(*) - count(input_tokens), sum(input_tokens), sum(cached_input_tokens),
           sum(cache_write_tokens), sum(output_tokens), count(*) - count(cost_usd), fsum(cost_usd),
           sum(hit_tool_cap::INT), count(hit_tool_cap), sum((error IS NOT NULL)::INT), GROUPING(model) = 1 AS whole
    FROM (SELECT {columns} FROM replays) WHERE side <> 'recorded'
    GROUP BY GROUPING SETS ((side, model), (side)) ORDER BY side, whole, model
"""
#: The replays' columns read, each with its type (null where a table has none: a run's have each).
_READS = {"side": "VARCHAR", "model": "VARCHAR", "input_tokens": "BIGINT", "cached_input_tokens": "BIGINT",
          "cache_write_tokens": "BIGINT", "output_tokens": "BIGINT", "cost_usd": "DOUBLE", "hit_tool_cap": "BOOLEAN",
          "error": "VARCHAR"}  # fmt: skip


def spend_rows(con: Any) -> list[SpendRow]:
    """Per side and model, the replays of the run open on DuckDB connection ``con`` (its ``replays`` view) added
    up, and per side (``whole_side``: every model's replays summed as one, its cost a sum of every replay's, not of
    the models' rounded sums), from one scan: what :func:`side_spend` and the analysis' summary of each side
    read."""
    have = {str(c) for c in con.sql("SELECT * FROM replays LIMIT 0").columns}
    columns = ", ".join(f"{c if c in have else 'NULL'}::{t} AS {c}" for c, t in _READS.items())
    return [SpendRow(*row) for row in con.execute(_QUERY.format(columns=columns)).fetchall()]


def side_spend(con: Any, prices: Mapping[str, Any] | None = None, *,
               rows: Sequence[SpendRow] | None = None) -> list[SideSpend]:  # fmt: skip
    """The spend of each side of the run open on DuckDB connection ``con`` (with its ``replays`` view), at the
    run's ``prices`` (model -> :class:`~delta_eval.pricing.Price` or its dict); from its :func:`spend_rows` when
    given (read otherwise)."""
    table = {k: v if isinstance(v, Price) else Price.model_validate(v) for k, v in (prices or {}).items()}
    groups: dict[str, list[SpendRow]] = {}
    for row in spend_rows(con) if rows is None else rows:
        if not row.whole_side:
            groups.setdefault(row.side, []).append(row)
    out = []
    for side, mine in groups.items():
        replays = sum(r.replays for r in mine)
        unknown = sum(r.unknown_usage for r in mine)
        known = unknown == 0
        usages = [Usage(input_tokens=int(r.input_tokens or 0), cached_input_tokens=int(r.cache_read_tokens or 0),
                        cache_write_tokens=int(r.cache_write_tokens or 0), output_tokens=int(r.output_tokens or 0))
                  for r in mine]  # fmt: skip
        costs = [float(r.cost_usd or 0.0) if r.unpriced == 0 else None for r in mine]
        full, actual = [], []
        for r, u in zip(mine, usages, strict=True):
            price = price_for(str(r.model), table)
            # What caching changed is the input's price only: the same tokens, every input token at full price.
            full.append(cost(u.model_copy(update={"cached_input_tokens": 0, "cache_write_tokens": 0}), price))
            actual.append(cost(u, price))
        full_usd, actual_usd = total_cost(full), total_cost(actual)
        out.append(
            SideSpend(
                side=side,
                replays=replays,
                unknown_usage=unknown,
                input_tokens=sum(u.input_tokens for u in usages) if known else None,
                cache_read_tokens=sum(u.cached_input_tokens for u in usages) if known else None,
                cache_write_tokens=sum(u.cache_write_tokens for u in usages) if known else None,
                output_tokens=sum(u.output_tokens for u in usages) if known else None,
                cost_usd=total_cost(costs),
                full_price_usd=full_usd if known else None,
                saved_usd=full_usd - actual_usd if known and full_usd is not None and actual_usd is not None else None,
            )
        )
    return out


def _n(value: int | None) -> str:
    return f"{value:>12,d}" if value is not None else f"{'unknown':>12s}"


def _usd(value: float | None) -> str:
    return f"{value:>11.4f}" if value is not None else f"{'unknown':>11s}"


def spend_lines(spend: list[SideSpend]) -> list[str]:
    """The per-side token and prompt-cache lines of the report."""
    lines = ["prompt cache   input tokens  cache reads cache writes     cost USD  at full price  saved by caching"]
    for s in spend:
        share = f" ({s.read_share:.0%} of input read from cache)" if s.read_share is not None else ""
        unknown = f"  ({s.unknown_usage} replays reported no usage)" if s.unknown_usage else ""
        lines.append(
            f"  {s.side:10s} {_n(s.input_tokens)} {_n(s.cache_read_tokens)} {_n(s.cache_write_tokens)} "
            f"{_usd(s.cost_usd)}    {_usd(s.full_price_usd)}       {_usd(s.saved_usd)}{share}{unknown}"
        )
    return lines
