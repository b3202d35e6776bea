"""The user of a session: the recorded user's messages while a side stays on the recording, or a model playing
the user from the user's goal.

The model's prompt (the same for both sides of a session: same goal, same seed) is a system prompt of instructions
(play the customer, reveal information only when asked, push back as the real user did, end with ``###STOP###``),
and one user message with the goal and the transcript so far in :mod:`delta_eval.tagged` sections::

    <goal>
    You are mia_li_3668. You want to fly from New York to Seattle on May 20 ...
    </goal>

    <transcript>
    [customer] Hi! I'm looking to book a flight ...
    [agent] Could you please provide your user ID?
    </transcript>

The goal is a metadata field of the conversation where the export records one (tau-bench's task instruction), else
a summary of the recorded conversation written once per conversation by the same model (cached, so both sides and
every rerun get the same one). Calls are keyed by the session, not the side: two sides whose transcripts are the
same are answered the same. Tool calls and their results are left out of the transcript: the user does not see
them.

Example:
    >>> from delta_eval.schema import Message
    >>> print(render_transcript([Message(role="user", content="hi"), Message(role="assistant", content="Hello!")]))
    <transcript>
    [customer] hi
    [agent] Hello!
    </transcript>
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.simulated_user import STOP
from delta_eval.calls import ModelRequest
from delta_eval.paths import MISSING, get_path
from delta_eval.pricing import Price
from delta_eval.replay.simulator_log import SimulatorLog
from delta_eval.schema import Message, ReplayPoint, UserSource
from delta_eval.tagged import section, segment

__all__ = [
    "STOP",
    "SUMMARY_INSTRUCTIONS",
    "USER_INSTRUCTIONS",
    "UserSimulator",
    "UserTurn",
    "render_transcript",
    "reply_prompt",
    "summary_prompt",
]

USER_INSTRUCTIONS = f"""You play the customer in a conversation with a customer-service agent, to test the agent.
Your goal and what you know are in <goal>; the conversation so far is in <transcript>.
- Write only the customer's next message, in the first person, as the customer would type it.
- Reveal information only when the agent asks for it, one piece at a time; never invent facts the goal lacks.
- Push back as the real customer would when the agent refuses or proposes something that does not fit the goal.
- Do not repeat the goal verbatim, do not act as the agent, do not mention tools.
- When the goal is reached, cannot be reached, or the agent hands you over to someone else, end with {STOP}."""

SUMMARY_INSTRUCTIONS = """Read the conversation between a customer and a customer-service agent in <conversation>.
Write, in the second person, the customer's goal and everything the customer knows and said (identifiers, dates,
preferences, what they accept and refuse), as instructions for someone who will play this customer. At most 150
words. Do not describe what the agent did."""


@dataclass(frozen=True)
class UserTurn:
    """What the user said next, where it came from, and whether it ends the session."""

    text: str | None
    source: UserSource
    stop: bool


def _visible(messages: Sequence[Message]) -> list[tuple[str, str]]:
    out = []
    for m in messages:
        if m.role == "user" and m.content:
            out.append(("customer", m.content))
        elif m.role == "assistant" and m.content:
            out.append(("agent", m.content))
    return out


def render_transcript(messages: Sequence[Message]) -> str:
    """The user-visible transcript of ``messages`` (user and assistant text; no system prompt, tools or results)."""
    return section("transcript", "\n".join(segment(who, text) for who, text in _visible(messages)))


def summary_prompt(recorded: Sequence[Message]) -> str:
    """What the user simulator's model is asked (after :data:`SUMMARY_INSTRUCTIONS`) to summarise the user's goal
    from: the user-visible messages of the recorded conversation."""
    return section("conversation", "\n".join(segment(w, t) for w, t in _visible(recorded)))


def reply_prompt(goal: str, messages: Sequence[Message]) -> str:
    """What the user simulator's model is asked (after :data:`USER_INSTRUCTIONS`) for the user's next message: the
    goal and the user-visible transcript of ``messages``."""
    return "\n\n".join([section("goal", goal), render_transcript(messages)])


def parse_reply(text: str | None) -> tuple[str | None, bool]:
    """The user's message without the stop token, and whether it ended the session.

    Example:
        >>> parse_reply("Thanks! ###STOP###"), parse_reply("###STOP###"), parse_reply("Yes.")
        (('Thanks!', True), (None, True), ('Yes.', False))
    """
    body = text or ""
    if STOP not in body:
        return (body if body.strip() else None), False  # as said: the sides see exactly what the user wrote
    body = body.replace(STOP, "").strip()
    return (body or None), True


@dataclass
class UserSimulator:
    """Plays the user of every session of a run with ``client`` (``None``: only the recorded messages).

    ``goal`` is the metadata path of the user's goal (``None``: a summary of the recorded conversation); ``seed``
    is the run's, part of every call's cache key; ``prices`` overrides the catalogue's for the user's model.
    """

    client: ModelClient | None
    goal: str | None = None
    seed: int = 0
    prices: Mapping[str, Price] | None = None

    def _request(self, system: str, body: str, conversation_id: str) -> ModelRequest:
        assert self.client is not None
        return ModelRequest(
            model=self.client.model,
            messages=(Message(role="system", content=system), Message(role="user", content=body)),
            conversation_id=conversation_id,
        )

    async def goal_of(self, point: ReplayPoint, recorded: Sequence[Message], log: SimulatorLog) -> str:
        """The user's goal in the session of ``point``: its metadata field, else a summary of ``recorded`` (the
        whole recorded conversation; the call is recorded in ``log``). Raises ``KeyError`` naming a missing field,
        ``ProviderError`` from the model."""
        if self.goal is not None:
            value = get_path(point.metadata, self.goal)
            if value is MISSING or value is None or value == "":
                raise KeyError(f"conversation {point.conversation_id} has no {self.goal!r} (the user's goal)")
            return str(value)
        request = self._request(SUMMARY_INSTRUCTIONS, summary_prompt(recorded), point.conversation_id)
        result = await self._generate(request, f"goal:{self.seed}:{point.conversation_id}", log, "goal")
        return result or ""

    async def _generate(self, request: ModelRequest, namespace: str, log: SimulatorLog, purpose: str) -> str | None:
        assert self.client is not None
        # Both sides of a session often ask the same question at once: the client sends it once (see generate).
        result = await self.client.generate(request, namespace=namespace)
        key = request.cache_key(namespace=namespace)
        log.add("user_simulator", purpose, self.client, key, result, self.prices)
        return result.response.message.content

    async def reply(self, point: ReplayPoint, goal: str, messages: Sequence[Message], log: SimulatorLog) -> UserTurn:
        """The simulated user's next message after ``messages`` (the session so far, opening included; the call is
        recorded in ``log``)."""
        request = self._request(USER_INSTRUCTIONS, reply_prompt(goal, messages), point.conversation_id)
        # Keyed by the session, not the side: the same transcript gets the same answer on both sides.
        text = await self._generate(request, f"user:{self.seed}:{point.conversation_id}@{point.epoch}", log, "reply")
        said, stop = parse_reply(text)
        return UserTurn(said, "simulated", stop)
