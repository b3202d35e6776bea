"""Media bytes kept once per run folder, by hash.

A conversation's images, files and audio (:class:`~delta_eval.schema.MediaPart`) would otherwise be repeated in the
``conversations`` table once per conversation that holds them (a logo in every system turn, a form every user
sends). Their bytes go instead, once per distinct SHA-256, to the ``media`` dataset (one row: hash, kind, media
type, base64 data); the message JSON of ``conversations`` keeps only the reference (kind, media type, hash, and the
URL or filename where there is one). Rows of one conversation and its new media are in the same batch, so a
committed conversation never refers to bytes that are not in the run.

:func:`restore_media` puts the bytes back into messages read from the tables;
:meth:`~delta_eval.store.folder.RunFolder.read_conversations` reads the sampled conversations of a run with
their media whole.

Example:
    >>> from delta_eval.schema import MediaPart, Message, SampledConversation
    >>> image = MediaPart.from_bytes("image", b"png bytes", "image/png")
    >>> conv = SampledConversation(conversation_id="c", position=0, stratum="", weight=1.0, n_messages=1, n_turns=0,
    ...     n_pairs=0, messages=(Message(role="user", content="hi", media=(image,)),))
    >>> stored: set[str] = set()
    >>> kept, new = split_media(conv, stored)
    >>> kept.messages[0].media[0].data is None, [m.sha256 == image.sha256 for m in new]
    (True, [True])
    >>> split_media(conv, stored)[1]   # the same bytes again: nothing new to store
    []
    >>> restore_media(kept.messages, {m.sha256: m.data for m in new})[0].media[0] == image
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict

from delta_eval.schema import MediaKind, Message, SampledConversation

__all__ = ["StoredMedia", "restore_media", "split_media"]


class StoredMedia(BaseModel):
    """A row of the run's ``media`` dataset: the bytes (base64) of every media part with this SHA-256."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str
    kind: MediaKind
    media_type: str = ""
    data: str


def split_media(record: SampledConversation, stored: set[str]) -> tuple[SampledConversation, list[StoredMedia]]:
    """``record`` with the bytes of its media taken out (of its messages, and of the history each recorded call
    sent), and the media rows to store: those whose hash is not in ``stored`` yet (``stored`` is updated with
    them)."""
    new: list[StoredMedia] = []
    update: dict[str, object] = {}
    messages = _without_bytes(record.messages, stored, new)
    if messages is not None:
        update["messages"] = messages
    calls = []
    for call in record.calls:
        sent = _without_bytes(call.input, stored, new) if call.input is not None else None
        calls.append(call.model_copy(update={"input": sent}) if sent is not None else call)
    if any(a is not b for a, b in zip(calls, record.calls, strict=True)):
        update["calls"] = tuple(calls)
    return (record.model_copy(update=update) if update else record), new


def _without_bytes(messages: Iterable[Message], stored: set[str], new: list[StoredMedia]) -> tuple[Message, ...] | None:
    """``messages`` without the bytes of their media (``None`` when none had any), new media rows added to
    ``new``."""
    out: list[Message] = []
    changed = False
    for m in messages:
        if not any(p.data is not None for p in m.media):
            out.append(m)
            continue
        changed = True
        for p in m.media:
            if p.data is not None and p.sha256 not in stored:
                stored.add(p.sha256)
                new.append(StoredMedia(sha256=p.sha256, kind=p.kind, media_type=p.media_type, data=p.data))
        media = tuple(p.model_copy(update={"data": None}) if p.data is not None else p for p in m.media)
        out.append(m.model_copy(update={"media": media}))
    return tuple(out) if changed else None


def restore_media(messages: Iterable[Message], data: Mapping[str, str]) -> tuple[Message, ...]:
    """``messages`` with the bytes of their media put back from ``data`` (base64 by SHA-256); a part whose hash is
    not in ``data``, or that has a URL and no bytes, stays as it is."""
    out: list[Message] = []
    for m in messages:
        if any(p.data is None and p.url is None and p.sha256 in data for p in m.media):
            media = tuple(
                p.model_copy(update={"data": data[p.sha256]}) if p.data is None and p.url is None and p.sha256 in data
                else p
                for p in m.media
            )  # fmt: skip
            m = m.model_copy(update={"media": media})
        out.append(m)
    return tuple(out)
