"""Where conversations come from and how to read them: a :class:`SourceConfig` (a file or a DuckDB query) and the
:class:`FieldMapping` of its records (where each keeps its messages, id, metadata and tools).

A record is any JSON-like mapping (a JSON object, a Parquet row, a SQL result row). Paths are dotted
(``info.task.actions``); list items are addressed by number (``turns.0.text``). These are descriptions: the readers
in :mod:`delta_eval.ingest` open a source by them.

Example:
    >>> m = FieldMapping(messages="traj", id="{task_id}/{trial}", metadata=["task_id", "reward"])
    >>> conv = m.to_conversation({"task_id": 3, "trial": 1, "reward": 1.0,
    ...                           "traj": [{"role": "user", "content": "hi"}]}, source="x.json", label="record 0")
    >>> conv.id, conv.metadata
    ('3/1', {'task_id': 3, 'reward': 1.0})
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_serializer, field_validator, model_validator

from delta_eval.chat_format import load_tools, parse_messages, parse_tools
from delta_eval.exceptions import RecordError
from delta_eval.paths import MISSING, get_path
from delta_eval.schema import Conversation, ToolSpec

__all__ = ["MESSAGE_FORMATS", "PSEUDONYM_KINDS", "FieldMapping", "MessageFormat", "Pseudonymize", "SourceConfig"]

#: The message formats a source may hold: OpenAI chat, the providers' native request bodies, traces (one record per
#: model call, grouped into conversations: OpenTelemetry GenAI spans, OpenInference spans, Langfuse observations,
#: LangSmith runs), or ``auto`` (told from the first record's shape). Their readers are in :mod:`delta_eval.ingest`.
MessageFormat = Literal[
    "openai", "anthropic", "gemini", "openai-responses", "otel", "openinference", "langfuse", "langsmith", "auto"
]
MESSAGE_FORMATS: tuple[str, ...] = (
    "openai",
    "anthropic",
    "gemini",
    "openai-responses",
    "otel",
    "openinference",
    "langfuse",
    "langsmith",
    "auto",
)


def maybe_json(value: Any) -> Any:
    """``value`` parsed when it is JSON text of a list or object, else as it is.

    Example:
        >>> maybe_json('[1, 2]'), maybe_json("[not json")
        ([1, 2], '[not json')
    """
    # Parquet and SQL sources often store messages and tools as JSON text; accept both shapes.
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


#: The kinds of personal data :class:`Pseudonymize` finds by itself.
PSEUDONYM_KINDS = ("email", "phone", "card", "iban", "cpf", "cnpj", "ssn", "ipv4", "ipv6")


class Pseudonymize(BaseModel):
    """Personal data replaced by fake values of the same shape as conversations are read, before anything is sent
    to a model or written (the work is done by :mod:`delta_eval.ingest.pseudonymize`).

    - ``kinds``: what to find: ``email``, ``phone``, ``card`` (Luhn-valid only), ``iban`` (mod-97-valid only),
      ``cpf`` / ``cnpj`` (valid check digits only), ``ssn``, ``ipv4``, ``ipv6``; default: all of them.
    - ``patterns``: regular expressions of your own identifiers (``"ACME-\\\\d{6}"``); each match becomes a fake of
      the same shape (a digit for a digit, a letter for a letter).
    - ``fields``: metadata paths whose values are personal (``"user.name"``); the value is replaced, and so is the
      same text wherever it appears in the conversation.
    - ``salt``: seeds the fake values; default: a random salt per source (so per run). Give one to make a run
      reproducible (and resumable with the same fakes). The run folder keeps only its sha256, never the salt.
    - ``keep_mapping``: write ``pseudonyms.json`` to the run folder: salted sha256 of each real value -> its fake
      value and kind (never the real values). Off by default.

    The same real value becomes the same fake value wherever it appears in a run with one salt: across a
    conversation's messages, tool-call arguments (JSON stays valid) and tool results, and across conversations.

    Example:
        >>> Pseudonymize(kinds=["email", "card"], patterns=["ACME-\\\\d{6}"], salt="s").kinds
        ('email', 'card')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kinds: tuple[str, ...] = PSEUDONYM_KINDS
    patterns: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    salt: str | None = None
    keep_mapping: bool = False

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [k for k in value if k not in PSEUDONYM_KINDS]
        if unknown:
            raise ValueError(f"unknown kinds {unknown}; expected some of {', '.join(PSEUDONYM_KINDS)}")
        return value

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
        return value

    @field_serializer("salt", when_used="json")
    def _salt_digest(self, salt: str | None) -> str | None:
        # JSON dumps (the run folder's config, the fingerprint) name the salt without giving it away: with it, the
        # salted hashes of short values (a phone number) could be reversed by trying them all.
        return None if salt is None else "sha256:" + hashlib.sha256(salt.encode()).hexdigest()


class FieldMapping(BaseModel):
    """How to read a conversation out of one source record.

    - ``messages``: dotted path to the list of OpenAI-chat messages (default ``messages``).
    - ``id``: a path to the id field, or a template such as ``"{task_id}/{trial}"`` filled from the record's
      fields; when ``None``, the record's ``id`` field is used if present, else its position in the source.
    - ``metadata``: fields to keep beside the conversation, as a list of paths (kept under the path's last part)
      or a mapping ``{name: path}``.
    - ``tools``: tool specs offered to every conversation (a list, or the path of a JSON file holding one).
    - ``tools_field``: dotted path to per-record tool specs; used when present, overriding ``tools``.
    - ``message_format``: ``openai`` (chat messages, the default), a provider's native request body
      (``anthropic``: ``system`` + ``messages``; ``gemini``: ``systemInstruction`` + ``contents``;
      ``openai-responses``: ``instructions`` + ``input``/``output``), or ``auto`` to tell from the first record.
      For a native format the body is the record itself, or the object at ``messages`` when that is one. A trace
      format (``otel``, ``openinference``, ``langfuse``, ``langsmith``) reads one record per model call and groups
      them into conversations; ``id`` and ``metadata`` paths then read the attributes of a conversation's first call.

    For nested exports (one document holding many conversations, messages in another dialect):

    - ``records``: the path of the list of conversation records inside each document (``"simulations[*]"``);
      metadata paths starting with ``$.`` then read the document itself (``"$.info.domain"``).
    - ``message_fields``: where a message keeps a field under another name, as ``{canonical: source}``
      (``{"tool_call_id": "id"}``).
    - ``roles``: source roles renamed (``{"human": "user"}``); a role mapped to ``None`` or ``""`` is left out.
    - ``skip``: messages and tool calls whose fields have these values are left out (``{"requestor": "user"}``:
      tool calls the user side made, which the agent never saw, and their results); a user message left with
      nothing to say goes too.

    Example:
        >>> m = FieldMapping(records="simulations[*]", message_fields={"tool_call_id": "id"},
        ...                  skip={"requestor": "user"}, metadata={"domain": "$.info.domain"})
        >>> doc = {"info": {"domain": "telecom"}, "simulations": [{"id": "s1", "messages": [
        ...     {"role": "user", "content": "my phone is offline"},
        ...     {"role": "user", "content": None, "tool_calls": [
        ...         {"id": "u1", "name": "toggle_airplane_mode", "arguments": {}, "requestor": "user"}]},
        ...     {"role": "tool", "id": "u1", "content": "off", "requestor": "user"},
        ...     {"role": "assistant", "content": None, "tool_calls": [
        ...         {"id": "a1", "name": "check_line", "arguments": {"line": 1}, "requestor": "assistant"}]},
        ...     {"role": "tool", "id": "a1", "content": "ok", "requestor": "assistant"},
        ...     {"role": "assistant", "content": "Your line works."}]}]}
        >>> conv = m.to_conversation(m.records_of(doc)[0], source="x.json", root=doc)
        >>> [msg.role for msg in conv.messages], conv.metadata
        (['user', 'assistant', 'tool', 'assistant'], {'domain': 'telecom'})
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: str = "messages"
    id: str | None = None
    metadata: tuple[str, ...] | dict[str, str] = ()
    tools: tuple[ToolSpec, ...] = ()
    tools_field: str | None = "tools"
    records: str | None = None
    message_fields: dict[str, str] = {}
    roles: dict[str, str | None] = {}
    skip: dict[str, Any] = {}
    message_format: MessageFormat = "openai"

    def records_of(self, document: Any) -> list[Any]:
        """The conversation records inside one document (``records``); the document itself when unset. Raises
        ``ValueError`` when the path leads to no list."""
        if self.records is None:
            return [document]
        path = self.records.removesuffix("[*]")
        found = get_path(document, path) if path else document
        if not isinstance(found, list):
            what = "nothing" if found is MISSING else f"a {type(found).__name__}"
            raise ValueError(f"the records path {self.records!r} leads to {what}, not a list")
        return found

    def _dialect(self, raw: Any) -> Any:
        """Messages of another dialect in the chat format: fields renamed, roles mapped, skipped ones left out."""
        if not (self.message_fields or self.roles or self.skip) or not isinstance(raw, list):
            return raw
        out = []
        for m in raw:
            if not isinstance(m, Mapping):
                out.append(m)
                continue
            if self._skipped(m):
                continue
            m = dict(m)
            for canonical, source_name in self.message_fields.items():
                if source_name in m and canonical not in m:
                    m[canonical] = m.pop(source_name)
            if isinstance(m.get("role"), str) and m["role"] in self.roles:
                if not (role := self.roles[m["role"]]):
                    continue
                m["role"] = role
            calls = m.get("tool_calls")
            if self.skip and isinstance(calls, list):
                kept = [c for c in calls if not (isinstance(c, Mapping) and self._skipped(c))]
                m["tool_calls"] = kept or None
                if not kept and calls and m.get("role") != "assistant" and m.get("content") in (None, ""):
                    continue  # a user message that only made tool calls the agent never saw
            out.append(m)
        return out

    def _skipped(self, item: Mapping[str, Any]) -> bool:
        return bool(self.skip) and all(item.get(k, MISSING) == v for k, v in self.skip.items())

    @field_validator("tools", mode="before")
    @classmethod
    def _load_tools(cls, value: Any) -> Any:
        return load_tools(value)

    def metadata_paths(self) -> dict[str, str]:
        """The metadata fields to keep, as ``{name: path}``."""
        if isinstance(self.metadata, dict):
            return dict(self.metadata)
        return {path.rsplit(".", 1)[-1]: path for path in self.metadata}

    @field_validator("roles")
    @classmethod
    def _known_roles(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for source_role, role in value.items():
            if role and role not in ("system", "user", "assistant", "tool"):
                raise ValueError(
                    f"role {source_role!r} maps to {role!r}; map to system, user, assistant or tool, or to null or "
                    '"" to leave it out'
                )
        return value

    def conversation_id(self, record: Mapping[str, Any], *, source: str, label: str, position: int) -> str:
        """The id of one record, following ``id``."""
        if self.id is None:
            value = record.get("id")
            return str(value) if value is not None else str(position)
        if "{" not in self.id:
            value = get_path(record, self.id)
            if value is MISSING or value is None:
                raise RecordError(source, label, self.id, "the id field is missing")
            return str(value)
        try:
            return _PathFormatter().vformat(self.id, (), record)
        except KeyError as exc:
            raise RecordError(source, label, "id", f"id template {self.id!r} needs field {exc}") from None
        except (IndexError, ValueError, TypeError) as exc:
            raise RecordError(source, label, "id", f"id template {self.id!r} failed: {exc}") from None

    def to_conversation(
        self, record: Any, *, source: str, label: str = "", position: int = 0, root: Any = None
    ) -> Conversation:
        """Build a validated :class:`Conversation` from one record, or raise :class:`RecordError`. ``root`` is
        the document the record came from (metadata paths starting with ``$.`` read it)."""
        if not isinstance(record, Mapping):
            raise RecordError(source, label, "", f"a record must be an object, not {type(record).__name__}")
        conv_id = self.conversation_id(record, source=source, label=label, position=position)
        label = f"{label} (id {conv_id})" if label else f"id {conv_id}"
        raw_messages = get_path(record, self.messages)
        if raw_messages is MISSING:
            raise RecordError(source, label, self.messages, "the messages field is missing")
        messages = parse_messages(
            self._dialect(maybe_json(raw_messages)), source=source, record=label, field=self.messages
        )
        tools = self.tools
        if self.tools_field:
            raw_tools = get_path(record, self.tools_field)
            if raw_tools is not MISSING and raw_tools is not None:
                tools = parse_tools(maybe_json(raw_tools), source=source, record=label, field=self.tools_field)
        metadata = self.metadata_of(record, root)
        return Conversation(id=conv_id, messages=messages, tools=tools, metadata=metadata, source=source, record=label)

    def metadata_of(self, record: Mapping[str, Any], root: Any = None) -> dict[str, Any]:
        """The metadata fields of one record (``$.`` paths read ``root``, the document it came from).

        Example:
            >>> FieldMapping(metadata={"tier": "user.tier"}).metadata_of({"user": {"tier": "gold"}})
            {'tier': 'gold'}
        """
        metadata = {}
        for name, path in self.metadata_paths().items():
            if path.startswith("$."):
                value = get_path(root if root is not None else record, path[2:])
            else:
                value = get_path(record, path)
            # Kept exactly as found: a string that happens to look like JSON stays a string.
            metadata[name] = None if value is MISSING else value
        return metadata


class _PathFormatter(string.Formatter):
    """Lets an id template say ``{info.task.user_id}`` as well as ``{task_id}``."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        value = get_path(kwargs, field_name)
        if value is MISSING:
            raise KeyError(field_name)
        return value, field_name


class SourceConfig(FieldMapping):
    """A source of conversations: a file (``path``: JSON, JSONL or Parquet, see ``format``) or a DuckDB ``sql``
    query over any file DuckDB reads (or the tables of ``database``), and the field mapping of its records.

    Example:
        >>> SourceConfig(path="exports/conversations.jsonl", metadata=["tier"]).metadata
        ('tier',)
    """

    path: Path | None = None
    sql: str | None = None
    database: str | None = None
    format: str | None = None
    pseudonymize: Pseudonymize | None = None

    @model_validator(mode="after")
    def _one_place(self) -> SourceConfig:
        if (self.path is None) == (self.sql is None):
            raise ValueError("a source needs exactly one of 'path' or 'sql'")
        return self
