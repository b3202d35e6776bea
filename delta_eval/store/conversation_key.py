"""A conversation's key: a 64-bit integer named by its id, stored beside each verdict so that a query groups a
run's verdicts by conversation on a number instead of on text (grouping a million verdicts by the id's text costs
about twice the whole win-rate query).

The key is the 8-byte BLAKE2b digest (``digest_size=8``, not a longer digest cut short) of the id's UTF-8 bytes,
as a signed (little-endian) integer:
a function of the id alone, so every process, shard, machine and resumed run writes the same key for the same
conversation. Two ids share a key with probability 2**-64 per pair of ids: for any two of a million conversations,
under 3e-8 (BLAKE2b is a cryptographic hash: no id can be found that collides with a given one). See
:func:`delta_eval.metrics.counted.counted` for what the win rate does with the keys.

A pair's key (:func:`pair_key`), the same digest of its id (an empty id has one), is stored beside each replay so
that the decision's replay gates pair the two sides' replays on a number (joining a million pairs on the ids'
text costs 2-4 times as much); two pairs share one with the same probability. It must be the key of the row's
``pair_id``, as the run's writer and its merges make it: it is not checked against the id.

Example:
    >>> conversation_key("c1") == conversation_key("c1"), conversation_key("")
    (True, None)
    >>> pair_key("c1#0") == pair_key("c1#0") != pair_key("c1#1"), pair_key("") is None, pair_key(None)
    (True, False, None)
"""

from __future__ import annotations

import hashlib

__all__ = ["conversation_key", "pair_key"]


def conversation_key(conversation_id: str | None) -> int | None:
    """The key of the conversation ``conversation_id``; ``None`` for a row without a conversation (no id, or an
    empty one: such a row is a conversation of its own, named by its pair)."""
    if not conversation_id:
        return None
    return _key(conversation_id)


def pair_key(pair_id: str | None) -> int | None:
    """The key of the pair ``pair_id`` (an empty id too: pairs are joined on their ids, which an empty one matches);
    ``None`` only without an id."""
    return None if pair_id is None else _key(pair_id)


def _key(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)
