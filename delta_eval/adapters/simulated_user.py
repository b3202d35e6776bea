"""The simulated model as a session's user: when a request is a user simulator's, it answers what the recorded
user said, so demos and tests roll sessions forward end to end without a provider.

A request is a user simulator's when its last message holds a ``<goal>`` and a ``<transcript>`` section (the layout
of :mod:`delta_eval.replay.user_simulator`, in :mod:`delta_eval.tagged`): the transcript is one segment per message,
``[customer] ...`` or ``[agent] ...``. The simulated user finds the recorded conversation that opened with the
transcript's first customer message and says its next recorded user message (the ``k``-th, after ``k`` customer
messages), whatever the agent said: it pushes on as the real user did. When the recorded user has nothing left to
say, or no recorded conversation opened that way, it ends the session with the stop token. Where the transcript
is exactly what a recorded user had seen, it says what that user said next (openings shared by several recordings).

Example:
    >>> from delta_eval.adapters.recordings import RecordingIndex
    >>> from delta_eval.schema import Conversation, Message
    >>> idx = RecordingIndex()
    >>> idx.add([Conversation(id="c", messages=(Message(role="user", content="hi"),
    ...     Message(role="assistant", content="hello"), Message(role="user", content="bye")))])
    >>> text = "<goal>\\nleave\\n</goal>\\n<transcript>\\n[customer] hi\\n[agent] Hello!\\n</transcript>"
    >>> user_answer(text, idx)
    'bye'
    >>> user_answer(text.replace("[agent] Hello!", "[agent] Hello!\\n[customer] bye\\n[agent] ok"), idx)
    '###STOP###'
"""

from __future__ import annotations

from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.calls import ModelRequest
from delta_eval.tagged import sections, segments, unescape

__all__ = ["STOP", "is_user_simulator", "transcript_of", "user_answer"]

#: What a user simulator says to end the session (as tau-bench's user simulators do).
STOP = "###STOP###"


def _sections(request: ModelRequest) -> dict[str, str]:
    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user" or not last.content or "<transcript>" not in last.content:
        return {}
    try:
        return dict(sections(last.content))
    except ValueError:
        return {}


def is_user_simulator(request: ModelRequest) -> bool:
    """Whether ``request`` asks for a session user's next message."""
    found = _sections(request)
    return "goal" in found and "transcript" in found


def transcript_of(text: str) -> list[tuple[str, str]]:
    """The ``(speaker, text)`` messages of a user simulator's prompt (``customer`` or ``agent``)."""
    found = dict(sections(text))
    return [(label, unescape(raw)) for label, raw in segments(found.get("transcript", ""))]


def user_answer(text: str, recordings: RecordingIndex) -> str:
    """The simulated user's next message for the prompt ``text`` (see the module docstring)."""
    said = transcript_of(text)
    exact = recordings.next_user_message([("user" if who == "customer" else "assistant", t) for who, t in said])
    if exact is not None:
        return exact
    customer = [t for speaker, t in said if speaker == "customer"]
    recorded = recordings.user_messages(customer[0]) if customer else None
    if recorded is None or len(customer) >= len(recorded):
        return STOP
    return recorded[len(customer)]
