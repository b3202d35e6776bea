"""KeptReading: one reading of a source, its conversations kept while they fit the budget."""

from __future__ import annotations

from delta_eval.demo import demo_conversations
from delta_eval.exceptions import RecordError
from delta_eval.sampling.kept import KeptReading
from delta_eval.sampling.population import iter_selected
from delta_eval.schema import Conversation


def test_the_kept_conversations_are_those_the_source_gives_again() -> None:
    source = demo_conversations()
    reading = KeptReading(source, size=lambda conv: len(conv.messages), budget=10**9)
    assert sum(1 for _ in reading) == 200
    positions = [150, 7, 0, 42, 7]
    kept = reading.selected(positions)
    assert kept is not None
    assert kept == list(iter_selected(source, positions))


def test_a_reading_over_the_budget_or_not_read_to_its_end_keeps_nothing() -> None:
    source = demo_conversations()
    sizes = [len(conv.messages) for conv in source]
    exact = KeptReading(source, size=lambda conv: len(conv.messages), budget=sum(sizes))
    list(exact)
    assert exact.selected([0]) is not None  # the budget is inclusive
    over = KeptReading(source, size=lambda conv: len(conv.messages), budget=sum(sizes) - 1)
    list(over)
    assert over.selected([0]) is None
    stopped = KeptReading(source, size=lambda conv: 1, budget=10**9)
    next(iter(stopped))
    assert stopped.selected([0]) is None


def test_bad_records_keep_their_positions() -> None:
    good = demo_conversations().load()[0][:2]
    items: list[Conversation | RecordError] = [good[0], RecordError("s", "record 1", "messages", "bad"), good[1]]
    reading = KeptReading(items, size=lambda conv: 1, budget=10)
    assert list(reading) == items
    assert reading.selected([0, 1, 2]) == [(0, good[0]), (2, good[1])]
