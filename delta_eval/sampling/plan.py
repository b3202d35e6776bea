"""The sampling step of a run in one call: read the source once, draw the sample, and count what it holds.

Example:
    >>> import delta_eval as de
    >>> plan = sample_source(de.demo.demo_conversations(), de.Stratified(n=5, seed=1),
    ...                      counters={"messages": lambda conv: len(conv.messages)})
    >>> plan.read, len(plan.sample.selected), plan.totals["messages"] > 0
    (200, 5, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from delta_eval.exceptions import RecordError
from delta_eval.ingest.source import ConversationSource
from delta_eval.sampling.population import build_population
from delta_eval.sampling.stratified import SampleResult, Stratified, draw_sample
from delta_eval.schema import Conversation, ErrorRecord

__all__ = ["SamplePlan", "sample_source"]


@dataclass(frozen=True)
class SamplePlan:
    """A drawn sample and what reading the source found.

    ``read`` counts every record read (a record whose stratum function failed was read fine); ``read_errors`` the
    bad records among them; ``errors`` holds the error rows of both kinds; ``totals`` sums each counter over the
    drawn conversations.
    """

    sample: SampleResult
    read: int
    read_errors: int
    errors: list[ErrorRecord] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)


def sample_source(
    source: ConversationSource | Iterable[Conversation | RecordError],
    spec: Stratified,
    counters: Mapping[str, Callable[[Conversation], int]] | None = None,
) -> SamplePlan:
    """Read ``source`` once into its population table and draw ``spec``'s sample from it."""
    errors: list[ErrorRecord] = []
    population = build_population(source, spec, errors.append, counters=counters)
    sample = draw_sample(population, spec)
    drawn = population.filter(pc.is_in(population["position"], pa.array(sorted(sample.selected), pa.int64())))
    return SamplePlan(
        sample=sample,
        read=population.num_rows + len(errors),
        read_errors=sum(e.stage == "ingest" for e in errors),
        errors=errors,
        totals={name: int(pc.sum(drawn[name]).as_py() or 0) for name in counters or {}},
    )
