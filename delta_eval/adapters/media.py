"""What the adapters share to send media parts: the placeholder sent where a provider cannot take a part, said once.

Each adapter encodes a :class:`~delta_eval.schema.MediaPart` in its provider's own shape; where the provider cannot
take it (audio to Anthropic, an image in an OpenAI tool result, a part read back from a run without its bytes), the
part's placeholder text (``[image image/png sha256:1a2b3c4d5e6f]``: kind, media type, short hash) goes in its place,
so the model is still told something was there, and :func:`placeholder` says so once in the adapter's notes.

Example:
    >>> from delta_eval.schema import MediaPart
    >>> notes: list[str] = []
    >>> placeholder(MediaPart.from_bytes("audio", b"RIFF", "audio/wav"), notes.append, "Anthropic takes no audio")
    '[audio audio/wav sha256:a40ff3d5900f]'
    >>> notes
    ['audio/wav audio sent as placeholder text (kind, media type, hash): Anthropic takes no audio']
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from delta_eval.schema import MediaPart

__all__ = ["NO_BYTES", "Note", "decoded", "placeholder", "subtype", "with_text"]

#: Why a part without bytes or URL is sent as a placeholder (a part read back from a run's tables, not restored).
NO_BYTES = "the part holds neither its bytes nor a URL"

#: The adapter's note taker (:meth:`~delta_eval.adapters.base.ModelAdapter.note`), or ``None`` to say nothing.
Note = Callable[[str], None] | None


def placeholder(part: MediaPart, note: Note, why: str) -> str:
    """The text sent instead of ``part``; ``note`` is told once per reason (it keeps notes unique)."""
    if note is not None:
        what = f"{part.media_type} {part.kind}" if part.media_type else part.kind
        note(f"{what} sent as placeholder text (kind, media type, hash): {why}")
    return part.placeholder


def with_text(placeholders: list[str], text: str | None) -> str:
    """``text`` with the placeholders of parts not sent before it (media come before the text)."""
    return " ".join([*placeholders, *([text] if text else [])])


def subtype(part: MediaPart) -> str:
    """The subtype of the part's media type (``wav`` of ``audio/wav``), or ``""``.

    Example:
        >>> subtype(MediaPart.from_bytes("audio", b"x", "audio/mpeg"))
        'mpeg'
    """
    return part.media_type.partition("/")[2].split(";")[0].strip().lower()


def decoded(part: MediaPart) -> bytes:
    """The part's bytes (it must hold them)."""
    assert part.data is not None
    return base64.b64decode(part.data)
