"""The LLM judges' prompts: the package's versioned templates, the user's rubric, and a pair rendered as text.

The instructions (a system message) are the same for every pair of a run; the pair (a user message) is rendered
between tags the instructions name:

- stage 2 sees ``<last_user_message>`` and the two outputs, ``<output_a>`` and ``<output_b>``: what each says and
  the tool calls it makes with their arguments;
- stage 3 sees ``<tools>`` (with their parameter schemas), the system prompt (once, or per output where the two
  sides were given different ones), ``<conversation>`` (the history, recorded tool results included), the
  recorded production answer as ``<reference>`` when wanted, and both outputs with the tool results they got.

In an output, ``[calls]`` is a tool call, ``[result]`` its result, ``[result, could not run]`` a call that did not
execute in the replay (it left the recorded path, see :mod:`delta_eval.replay.tools`), ``[says]`` text written
beside tool calls and ``[replies]`` the final reply.

Every string placed in a prompt is untrusted (replies, tool names, arguments, results, the conversation, the system
prompt: they come from production logs and the models under test) and is rendered with :mod:`delta_eval.tagged`,
so that none can leave its place: no content forms a tag, no content line passes for a labelled line, and calls are
rendered from the structured replay, never from text. A reply that writes ``</output_a>`` or ``[calls] refund(...)``
is shown as having written it; the instructions tell the judge that what is inside the tags is data to judge, never
instructions to follow. Every call's arguments (outputs, reference and history) are
shown in one canonical layout (:func:`~delta_eval.matching.display_arguments`), so that the judge sees what a
call says and not how the provider's wire spaced it. A message longer than :data:`MAX_CHARS` is cut in the middle
with a marker, so one huge tool result cannot crowd out the rest.

The prompt hash is the SHA-256 (first 12 hex digits) of the instructions as sent, so a changed template, rubric or
option gives verdict rows a new hash (and, the request being different, new cache keys).

Example:
    >>> rubric = Rubric.default()
    >>> rubric.dimensions
    ('task_success', 'policy', 'accuracy', 'communication')
    >>> len(equivalence_instructions().hash)
    12
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from delta_eval.exceptions import ConfigError
from delta_eval.judges.base import PairView, SideView
from delta_eval.matching import display_arguments
from delta_eval.schema import Message, ToolSpec, TurnOutput
from delta_eval.tagged import call, escape, named, section, segment

__all__ = [
    "MAX_CHARS",
    "Instructions",
    "Rubric",
    "equivalence_instructions",
    "pairwise_instructions",
    "render_equivalence_pair",
    "render_pairwise_pair",
    "template",
]

#: The longest a single message, tool result or output text is shown to a judge, in characters.
MAX_CHARS = 8_000

_DIMENSION = re.compile(r"^\s*[-*]\s+`?([A-Za-z][A-Za-z0-9_]*)`?\s*[:—-]")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


_COMMENT = re.compile(r"<!--.*?-->\n?", re.DOTALL)


def template(name: str) -> str:
    """The text of the package's template ``name`` (``equivalence``, ``pairwise`` or ``rubric``), without its
    ``<!-- version -->`` comment (the model is not shown it; a changed text changes the hash anyway)."""
    text = (resources.files("delta_eval.judges") / "templates" / f"{name}.md").read_text(encoding="utf-8")
    return _COMMENT.sub("", text)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class Instructions:
    """A judge's instructions as sent (its system message) and their hash."""

    text: str

    @property
    def hash(self) -> str:
        """The first 12 hex digits of the SHA-256 of :attr:`text`."""
        return _hash(self.text)


@dataclass(frozen=True)
class Rubric:
    """The product and business intent a stage-3 judge follows: Markdown text and the dimensions it scores.

    The dimensions are the bullets under a ``## Dimensions`` heading, each ``- name: what it means``; a rubric
    without that section is scored on the default dimensions (see :meth:`default`).

    Example:
        >>> Rubric.parse("Refunds need a reason.\\n## Dimensions\\n- refund_policy: refunds follow policy").dimensions
        ('refund_policy',)
    """

    text: str
    dimensions: tuple[str, ...]

    @classmethod
    def default(cls) -> Rubric:
        """The package's rubric: task success, policy, accuracy and communication."""
        return cls.parse(template("rubric"))

    @classmethod
    def parse(cls, text: str) -> Rubric:
        """A rubric from its Markdown."""
        dims: list[str] = []
        inside = False
        for line in text.splitlines():
            if line.startswith("#"):
                inside = line.lstrip("#").strip().lower() == "dimensions"
                continue
            match = _DIMENSION.match(line) if inside else None
            if match and match.group(1) not in dims:
                dims.append(match.group(1))
        if not dims:
            dims = list(_default_dimensions())
        return cls(text=text.strip(), dimensions=tuple(dims))

    @classmethod
    def load(cls, path: str | Path | None, default: str | None = None) -> Rubric:
        """The rubric in the Markdown file at ``path`` (``None``: ``default``, Markdown text such as a session run's
        :data:`~delta_eval.judges.session.SESSION_RUBRIC`, else the package's)."""
        if path is None:
            return cls.parse(default) if default else cls.default()
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"rubric file not found: {p}")
        return cls.parse(p.read_text(encoding="utf-8"))


def _default_dimensions() -> tuple[str, ...]:
    dims: list[str] = []
    inside = False
    for line in template("rubric").splitlines():
        if line.startswith("#"):
            inside = line.lstrip("#").strip().lower() == "dimensions"
        elif inside and (match := _DIMENSION.match(line)):
            dims.append(match.group(1))
    return tuple(dims)


def equivalence_instructions() -> Instructions:
    """Stage 2's instructions."""
    return Instructions(template("equivalence").strip())


_REFERENCE_RULE = (
    "- <reference> is what the production assistant actually did at this point. It shows what the customer and\n"
    "  the business got, and what the tools returned; it may itself be imperfect. Use it as evidence, not as the\n"
    "  answer key: a reply that differs from it can still be the better one."
)


def pairwise_instructions(rubric: Rubric, *, reference: bool = True) -> Instructions:
    """Stage 3's instructions with ``rubric``; ``reference``: whether pairs show the recorded answer."""
    text = (
        template("pairwise")
        .replace("{rubric}", rubric.text)
        .replace("{reference_rule}\n", _REFERENCE_RULE + "\n" if reference else "")
        .replace("{dimensions}", ", ".join(rubric.dimensions))
    )
    return Instructions(text.strip())


def _cut(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    half = MAX_CHARS // 2
    return f"{text[:half]} [… {len(text) - 2 * half} characters cut …] {text[-half:]}"


def _output(out: TurnOutput, *, results: bool) -> str:
    # Calls come from the structured replay, never from text: a "[calls]" a reply writes stays inside its segment.
    lines: list[str] = []
    for step in out.steps:
        if step.text:
            lines.append(segment("says", _cut(step.text)))
        for c in step.tool_calls:
            lines.append(segment("calls", call(c.name, _cut(display_arguments(c))), raw=True))
        if results:
            for res in step.tool_results:
                label = {"simulated": "result, could not run", "llm": "result, simulated"}.get(res.source, "result")
                lines.append(segment(label, named(res.name, _cut(res.content)), raw=True))
        if step.user is not None:  # a session's transcript: what the user answered
            lines.append(segment("customer", _cut(step.user)))
    if out.final_text:
        lines.append(segment("replies", _cut(out.final_text)))
    return "\n".join(lines) if lines else segment("no reply: the turn ended without text or tool calls")


def _side_output(side: SideView, *, results: bool) -> str:
    text = _output(side.output, results=results)
    if side.hit_tool_cap:
        text += "\n" + segment("stopped: it was still calling tools when the replay's limit of tool rounds was reached")
    elif side.finish_reason == "length":
        text += "\n" + segment("stopped: the reply was cut off at the output token limit")
    return text


def _last_user_message(pair: PairView) -> str:
    for message in reversed(pair.point.context):
        if message.role == "user":
            return escape(_cut(message.text_with_media()))
    return "(none: the assistant speaks first)"


def render_equivalence_pair(pair: PairView) -> str:
    """The user message of a stage-2 call: the last user message and both outputs (tool calls, no results)."""
    return "\n\n".join(
        [
            section("last_user_message", _last_user_message(pair)),
            section("output_a", _side_output(pair.a, results=False)),
            section("output_b", _side_output(pair.b, results=False)),
        ]
    )


def _message(m: Message) -> list[str]:
    # Media are shown by their placeholder (kind, media type, short hash), never their bytes: a judge reads text,
    # and base64 would cost tokens for nothing.
    if m.role == "tool":
        return [segment("tool result", named(m.name, _cut(m.text_with_media())), raw=True)]
    lines: list[str] = []
    if m.content or m.media:
        lines.append(segment(m.role, _cut(m.text_with_media())))
    for c in m.tool_calls:
        lines.append(segment(f"{m.role} calls", call(c.name, _cut(display_arguments(c))), raw=True))
    return lines


def _tools(tools: tuple[ToolSpec, ...]) -> str:
    if not tools:
        return segment("no tools")
    lines: list[str] = []
    for t in tools:
        lines.append(segment("tool", named(t.name, t.description.strip()), raw=True))
        lines.append(segment("parameters", json.dumps(t.parameters, ensure_ascii=False)))
    return "\n".join(lines)


def _system(side: SideView, pair: PairView) -> str:
    messages = side.request.messages if side.request is not None else pair.point.context
    return escape(_cut("\n\n".join(m.content or "" for m in messages if m.role == "system")))


def _tools_of(side: SideView, pair: PairView) -> tuple[ToolSpec, ...]:
    return side.request.tools if side.request is not None else pair.point.tools


def _per_side(name: str, a: str, b: str) -> list[str]:
    # Shown once when the sides were given the same; labelled per output where they differ (a prompt change).
    if a == b:
        return [section(name, a)] if a else []
    return [section(f"{name}_a", a or "(none)"), section(f"{name}_b", b or "(none)")]


def render_pairwise_pair(pair: PairView, *, reference: bool = True) -> str:
    """The user message of a stage-3 call: tools, system prompt(s), history, reference and both outputs."""
    history = [line for m in pair.point.context if m.role != "system" for line in _message(m)]
    parts = [
        *_per_side("tools", _tools(_tools_of(pair.a, pair)), _tools(_tools_of(pair.b, pair))),
        *_per_side("system_prompt", _system(pair.a, pair), _system(pair.b, pair)),
        section("conversation", "\n".join(history) if history else segment("empty: the assistant speaks first")),
    ]
    if reference:
        parts.append(section("reference", _output(pair.point.recorded, results=True)))
    parts += [
        section("output_a", _side_output(pair.a, results=True)),
        section("output_b", _side_output(pair.b, results=True)),
    ]
    return "\n\n".join(parts)
