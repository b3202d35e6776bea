"""A conversation's key: a 64-bit integer named by its id, stored beside each verdict so that a query groups a
run's verdicts by conversation on a number instead of on text (grouping a million verdicts by the id's text costs
about twice the whole win-rate query).

The key is the first 8 bytes of the BLAKE2b digest of the id's UTF-8 bytes, as a signed (little-endian) integer:
a function of the id alone, so every process, shard, machine and resumed run writes the same key for the same
conversation. Two ids share a key with probability 2**-64 per pair of ids: for any two of a million conversations,
under 3e-8 (BLAKE2b is a cryptographic hash: no id can be chosen to collide either). See
:func:`delta_eval.metrics.counted.counted` for what the win rate does with the keys.

Example:
    >>> conversation_key("c1") == conversation_key("c1"), conversation_key("")
    (True, None)
"""

from __future__ import annotations

import hashlib

__all__ = ["conversation_key"]


def conversation_key(conversation_id: str | None) -> int | None:
    """The key of the conversation ``conversation_id``; ``None`` for a row without a conversation (no id, or an
    empty one: such a row is a conversation of its own, named by its pair)."""
    if not conversation_id:
        return None
    digest = hashlib.blake2b(conversation_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)
