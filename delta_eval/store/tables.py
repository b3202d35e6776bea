"""The datasets of a run folder, each declared once from its schema type (see :mod:`delta_eval.store.rows`).

- ``replays``: three rows a pair (baseline, candidate, and the recorded production turn), steps as nested lists
  (and ``conversation_key``, as the verdicts', and ``pair_key``, the pair's id as a 64-bit integer);
- ``verdicts``: one row a pair, with the stage that decided it (and ``conversation_key``, its conversation's id as
  a 64-bit integer: see :mod:`delta_eval.store.conversation_key`, and ``pair_key``, as the replays');
- ``verdict_tallies``: the verdicts of each batch counted by what the win rate reads of them (see
  :mod:`delta_eval.store.tallies`), derived from the verdicts: written with them, never by hand;
- ``replay_tallies``: the replays of each batch summed by side, epoch and conversation, as the decision's side
  metrics read them (see :mod:`delta_eval.store.replay_tallies`), derived from the replays likewise;
- ``judgements``: one row per judge call (stage 2 and 3), so both-order judging and panels keep every answer;
- ``simulator_calls``: one row per call of a session's user simulator or LLM tool simulator, per side (their
  tokens and cost, apart from the sides' own);
- ``errors``: one row per failure, naming source, record and field;
- ``conversations``: one row per sampled conversation, with its stratum, weight and content (messages as JSON,
  media parts by reference only);
- ``strata``: population and sample size per stratum;
- ``media``: the bytes (base64) of each distinct media part of the sampled conversations, once, by SHA-256 (see
  :mod:`delta_eval.store.media`).

Example:
    >>> TABLES["replays"].schema.field("input_tokens").type
    DataType(int64)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from delta_eval.schema import ErrorRecord, Judgement, Replay, SampledConversation, SimulatorCall, Stratum, Verdict
from delta_eval.store.conversation_key import conversation_key, pair_key
from delta_eval.store.media import StoredMedia
from delta_eval.store.replay_tallies import REPLAY_TALLIES, REPLAY_TALLY_TABLE
from delta_eval.store.rows import Computed, Table
from delta_eval.store.tallies import TALLIES, TALLY_TABLE

__all__ = ["DATASETS", "SCHEMAS", "TABLES"]

TABLES: dict[str, Table[Any]] = {
    "replays": Table(
        Replay,
        flatten={"output": "", "usage": ""},
        computed={
            "n_tool_calls": Computed(pa.int64(), lambda r: len(r.output.tool_calls)),
            # The side metrics group each side's replays by conversation on it, as the verdicts' below.
            "conversation_key": Computed(pa.int64(), lambda r: conversation_key(r.conversation_id)),
            # The decision's replay gates pair the two sides' replays on it.
            "pair_key": Computed(pa.int64(), lambda r: pair_key(r.pair_id)),
        },
    ),
    "verdicts": Table(
        Verdict,
        flatten={"judge_usage": "judge_"},
        # The conversation's key: what queries group verdicts by conversation on (a number: grouping on the id's
        # text costs twice as much); the pair's: what the decision's weighted replay gates join a pair's weight on.
        computed={
            "conversation_key": Computed(pa.int64(), lambda v: conversation_key(v.conversation_id)),
            "pair_key": Computed(pa.int64(), lambda v: pair_key(v.pair_id)),
        },
    ),
    TALLIES: TALLY_TABLE,
    REPLAY_TALLIES: REPLAY_TALLY_TABLE,
    "judgements": Table(Judgement, flatten={"usage": ""}),
    "simulator_calls": Table(SimulatorCall, flatten={"usage": ""}),
    "errors": Table(ErrorRecord),
    "conversations": Table(SampledConversation, as_json=("messages", "tools", "calls")),
    "strata": Table(Stratum),
    "media": Table(StoredMedia, no_statistics=("data",)),
}
DATASETS = tuple(TABLES)
SCHEMAS: dict[str, pa.Schema] = {name: table.schema for name, table in TABLES.items()}
