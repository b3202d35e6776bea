"""The sampling step of a run in one call: read the source once, draw the sample, and count what it holds.

Example:
    >>> import delta_eval as de
    >>> plan = sample_source(de.demo.demo_conversations(), de.Stratified(n=5, seed=1),
    ...                      counters={"messages": lambda conv: len(conv.messages)})
    >>> plan.read, len(plan.sample.selected), plan.totals["messages"] > 0
    (200, 5, True)
"""

from __future__ import annotations

from collections import Counter
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
    drawn conversations, and ``by_stratum`` over those of each stratum drawn from.
    """

    sample: SampleResult
    read: int
    read_errors: int
    errors: list[ErrorRecord] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    by_stratum: dict[str, dict[str, int]] = field(default_factory=dict)

    def nothing_to_run(self, source: str) -> str | None:
        """Why the sample holds no conversation, in a sentence naming the source (``None`` when it holds some).

        Example:
            >>> empty = SampleResult(selected={}, strata=(), population=0)
            >>> SamplePlan(empty, read=0, read_errors=0).nothing_to_run("x.jsonl")
            'x.jsonl holds no records'
        """
        if self.sample.selected:
            return None
        first = f" (the first: {self.errors[0].message})" if self.errors else ""
        if self.read == 0:
            return f"{source} holds no records"
        readable = self.read - self.read_errors
        if readable == 0 and self.read == 1:
            return f"{source} could not be read: {self.errors[0].message}"
        if readable == 0:
            return f"none of the {self.read} records of {source} could be read{first}; see the errors table"
        if self.sample.population == 0 and self.sample.excluded == 0:
            return (f"no conversation of {source} could be placed in a stratum ({len(self.errors)} errors{first}); "
                    "see the errors table")  # fmt: skip
        if self.sample.population == 0:
            return f"the sample's 'where' condition left out all {self.sample.excluded} conversations of {source}"
        return f"the sample drew no conversation from the {self.sample.population} of {source}"

    def strata_without_turns(self, *, turns: str = "n_pairs", greetings: str = "greetings") -> dict[str, str]:
        """The strata drawn from whose conversations hold no turn to replay, each with why (``turns`` and
        ``greetings`` name the counters, as for :meth:`nothing_to_replay`): they add nothing to any estimate.

        Example:
            >>> drawn = SampleResult(selected={0: ("a", 1.0), 1: ("b", 1.0)}, strata=(), population=2)
            >>> SamplePlan(drawn, read=2, read_errors=0,
            ...            by_stratum={"a": {"n_pairs": 3}, "b": {"n_pairs": 0}}).strata_without_turns()
            {'b': '1 conversation drawn, no assistant turns to replay'}
        """
        drawn = Counter(h for h, _ in self.sample.selected.values())
        out = {}
        for h, n in sorted(drawn.items()):
            sums = self.by_stratum.get(h, {})
            if sums.get(turns, 0) > 0:
                continue
            left_out = sums.get(greetings, 0)
            out[h] = f"{n} conversation{'' if n == 1 else 's'} drawn, " + (
                f"all {left_out} turns are greetings, left out (replay_greetings replays them)"
                if left_out
                else "no assistant turns to replay"
            )
        return out

    def nothing_to_replay(self, source: str, *, turns: str = "n_pairs", greetings: str = "greetings") -> str | None:
        """Why the drawn conversations hold no turn to replay, in a sentence naming the source (``None`` when they
        hold some, or when nothing was drawn: :meth:`nothing_to_run` says why). ``turns`` and ``greetings`` name
        the counters of the turns to replay and of the greetings left out.

        Example:
            >>> drawn = SampleResult(selected={0: ("all", 1.0), 1: ("all", 1.0)}, strata=(), population=2)
            >>> SamplePlan(drawn, read=2, read_errors=0, totals={"n_pairs": 0}).nothing_to_replay("x.jsonl")
            '2 conversations read from x.jsonl, none has an assistant turn to replay'
        """
        if not self.sample.selected or self.totals.get(turns, 0) > 0:
            return None
        drawn = len(self.sample.selected)
        bad = f"; {self.read_errors} more records could not be read (see the errors table)" if self.read_errors else ""
        if (left_out := self.totals.get(greetings, 0)) > 0:
            return (
                f"all {left_out} assistant turns of the {drawn} conversations drawn from {source} are greetings "
                f"(plain text before the first user message), left out; set replay_greetings to replay them{bad}"
            )
        if drawn == self.sample.population and not self.sample.excluded:
            return f"{drawn} conversations read from {source}, none has an assistant turn to replay{bad}"
        return (
            f"none of the {drawn} conversations drawn from the {self.sample.population} of {source} has an assistant "
            f"turn to replay{bad}"
        )


def sample_source(
    source: ConversationSource | Iterable[Conversation | RecordError],
    spec: Stratified,
    counters: Mapping[str, Callable[[Conversation], int]] | None = None,
) -> SamplePlan:
    """Read ``source`` once into its population table and draw ``spec``'s sample from it (an empty one when no
    record could be read: see :meth:`SamplePlan.nothing_to_run`)."""
    errors: list[ErrorRecord] = []
    population = build_population(source, spec, errors.append, counters=counters)
    # Nothing readable: no sample to draw (its strata would name columns no record had); the caller says why.
    sample = (
        draw_sample(population, spec) if population.num_rows else SampleResult(selected={}, strata=(), population=0)
    )
    drawn = population.filter(pc.is_in(population["position"], pa.array(sorted(sample.selected), pa.int64())))
    by_stratum: dict[str, dict[str, int]] = {}
    columns = {name: drawn[name].to_pylist() for name in counters or {}}
    for k, position in enumerate(drawn["position"].to_pylist()):
        sums = by_stratum.setdefault(sample.selected[position][0], dict.fromkeys(columns, 0))
        for name, values in columns.items():
            sums[name] += values[k]
    return SamplePlan(
        sample=sample,
        read=population.num_rows + len(errors),
        read_errors=sum(e.stage == "ingest" for e in errors),
        errors=errors,
        totals={name: sum(values) for name, values in columns.items()},
        by_stratum=by_stratum,
    )
