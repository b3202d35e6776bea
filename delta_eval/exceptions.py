"""The exceptions delta_eval raises.

The tree::

    DeltaEvalError
    ├── ConfigError              a run configuration or variant that cannot work (raised before anything runs)
    ├── RecordError              one bad input record: names the source, the record and the field
    ├── RunFolderError           a run folder that cannot be opened, resumed or written
    │   ├── RunFolderLinkError   a symbolic link inside the folder where it would be written: refused
    │   └── RunFolderChangedError  the folder changed while it was read (a rerun dropped batches): read again
    ├── SourceError              a source with no conversation to replay (the errors table says why)
    ├── JudgeError               a judge's answer that cannot be used (malformed JSON, failed validation)
    ├── ToolSimulationError      a tool simulator failed on a replayed call (that replay ends in error)
    └── ProviderError            a model call failed; ``retryable`` says whether trying again may help
        ├── RateLimitError       429 / quota: retry after ``retry_after`` seconds if the provider said so
        ├── TransientError       5xx, timeouts, dropped connections: retry with backoff
        ├── AuthenticationError  bad or missing credentials, or no permission: never retried
        └── BadRequestError      the provider rejected the request itself: never retried
            ├── ContextLengthError   the prompt does not fit the model's context window
            └── ContentFilterError   the provider's content filter blocked the prompt

``RunFolderWarning`` (a ``UserWarning``) says a run folder was read without its damaged batches; ``SampleWarning``
(a ``UserWarning``) that a stratum field is missing from most conversations, which all share its ``(missing)``
stratum.

Per-record and per-call errors do not stop a run: they become rows of the run's ``errors`` table. Messages never
contain credentials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delta_eval.schema import Usage

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ConfigError",
    "ContentFilterError",
    "ContextLengthError",
    "DeltaEvalError",
    "JudgeError",
    "ProviderError",
    "RateLimitError",
    "RecordError",
    "RunFolderChangedError",
    "RunFolderError",
    "RunFolderLinkError",
    "RunFolderWarning",
    "SampleWarning",
    "SourceError",
    "SourceWarning",
    "ToolSimulationError",
    "TransientError",
]


class DeltaEvalError(Exception):
    """Base class of every error delta_eval raises on purpose."""


class ConfigError(DeltaEvalError, ValueError):
    """A configuration that cannot work, found before the run starts."""


class RunFolderError(DeltaEvalError):
    """A run folder that cannot be opened, resumed or written."""


class RunFolderLinkError(RunFolderError):
    """A symbolic link inside a run folder where the library would write or delete: refused, so that nothing outside
    the folder is ever written or deleted through it."""


class RunFolderChangedError(RunFolderError):
    """A run folder that changed while it was read (a rerun dropped or rewrote batches): reading again succeeds."""


class RunFolderWarning(UserWarning):
    """A run folder read with some of its batches damaged (they are left out, and named in the warning), or a
    damaged response cache moved aside."""


class SourceWarning(UserWarning):
    """A source read with something that looks like a mistake in its description: a metadata path that no record
    has (the warning names the nearest field names of the first record)."""


class SampleWarning(UserWarning):
    """A stratum field missing from most conversations of the population (more than half): they all fall in its
    ``(missing)`` stratum, which a misspelt field name or mapping path would cause. The run's manifest notes it."""


class JudgeError(DeltaEvalError):
    """A judge answered, but not in a form that can be used (or refused); the pair's verdict records it as an error.

    ``raw`` is what the judge said (e.g. ``{"text": ...}``), kept in the ``judgements`` table; ``usage``,
    ``cost_usd`` and ``latency_ms`` are what the calls that got this answer used, when the judge knows.
    """

    def __init__(
        self,
        message: str,
        raw: dict[str, Any] | None = None,
        *,
        usage: Usage | None = None,
        cost_usd: float | None = None,
        latency_ms: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.raw = raw
        self.usage = usage
        self.cost_usd = cost_usd
        self.latency_ms = latency_ms


class SourceError(DeltaEvalError):
    """The source gave no conversation to replay (empty, unreadable, every record bad, or all left out), or the
    conversations drawn have no assistant turn to replay; the message says which, and the bad records are rows of
    the run's ``errors`` table."""


class ToolSimulationError(DeltaEvalError):
    """A tool simulator failed on a replayed call; the replay ends with this error instead of the run."""


class RecordError(DeltaEvalError, ValueError):
    """One input record is malformed.

    Example:
        >>> str(RecordError("conversations.jsonl", "line 7", "messages[3].role", "unknown role 'bot'"))
        "conversations.jsonl, line 7, field messages[3].role: unknown role 'bot'"
    """

    def __init__(self, source: str, record: str, field: str, reason: str) -> None:
        self.source = source
        self.record = record
        self.field = field
        self.reason = reason
        where = ", ".join(part for part in (source, record, f"field {field}" if field else "") if part)
        super().__init__(f"{where}: {reason}" if where else reason)


class ProviderError(DeltaEvalError):
    """A model call failed.

    ``retryable`` says whether the same request may succeed later; ``retry_after`` is the wait in seconds the
    provider asked for, when it said one; ``status`` is the HTTP status when there was one; ``attempts`` is how
    many times the call was made before giving up.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        model: str = "",
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.model = model
        self.status = status
        self.retry_after = retry_after
        self.attempts = 0
        prefix = f"{model}: " if model else ""
        super().__init__(f"{prefix}{message}")


class RateLimitError(ProviderError):
    """The provider is rate limiting us (HTTP 429 or a quota signal)."""

    retryable = True


class TransientError(ProviderError):
    """A failure that usually passes: 5xx, overloaded, timeout, connection reset."""

    retryable = True


class AuthenticationError(ProviderError):
    """Credentials are missing or were refused. Never retried."""


class BadRequestError(ProviderError):
    """The provider rejected the request itself (invalid parameters, context too long, ...). Never retried."""


class ContextLengthError(BadRequestError):
    """The prompt (context, tools and output budget) does not fit the model's context window."""


class ContentFilterError(BadRequestError):
    """The provider's content filter refused the prompt."""
