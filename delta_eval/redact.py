"""Keep secrets out of everything a run writes: manifests, reports and error messages.

Example:
    >>> redact_secrets({"api_key": "sk-123", "api_key_env": "OPENAI_API_KEY", "base_url": "http://x"})
    {'api_key': '***', 'api_key_env': 'OPENAI_API_KEY', 'base_url': 'http://x'}
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # an annotation only: the command line imports this module, not pydantic, for its --help
    from pydantic import ValidationError

__all__ = [
    "REDACTED",
    "describe_invalid",
    "known_secrets",
    "redact_secrets",
    "redact_text",
    "register_secrets",
    "scrub_known",
]

#: Keys whose value is a secret wherever they appear (provider options, ``params.extra``, a judge's options).
_SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|token|password|passwd|authori[sz]ation|credential|cookie|signature|private[_-]?key|"
    r"bearer|session[_-]?id|^auth$|^key$|(access|secret|private|client|signing|encryption|master)[_-]?key)",
    re.IGNORECASE,
)
#: Keys that name a secret's word but count something else (``max_tokens``, ``thinking_budget_tokens``).
_NOT_SECRET_KEY = re.compile(r"(tokens|^max_|budget|_field$|_env$)", re.IGNORECASE)
#: Keys that hold HTTP headers: every value under them is secret (a header may carry any token).
_HEADERS_KEY = re.compile(r"headers?$", re.IGNORECASE)
#: Secrets recognised by their shape, wherever they are: keys of the major providers, Google OAuth access tokens,
#: AWS access key ids, bearer tokens, JWTs.
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|ya29\.[A-Za-z0-9._\-]{8,}|(?:AKIA|ASIA)[0-9A-Z]{16}|"
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}|"
    r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)"
)
#: The userinfo of a URL (``https://user:password@host``).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s]+@")
#: A credential in a URL's query (``?api-key=...``, ``&key=...``, ``&token=...``, a SAS ``sig=``).
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:api[_-]?key|apikey|key|token|access[_-]?token|auth|sig|signature|password|secret|code)=)"
    r"[^&#\s\"'<>]+",
    re.IGNORECASE,
)
#: ``name=value`` credentials in text (``api_key=...``, ``access_key = "..."``, ``password=...``).
_ASSIGNED_SECRET = re.compile(
    r"(?P<name>\b(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|secret|access[_-]?token|auth[_-]?token|"
    r"refresh[_-]?token|client[_-]?secret|password|passwd)\b\s*=\s*)(?P<q>[\"']?)[^\s\"'&,;}\]]+",
    re.IGNORECASE,
)
REDACTED = "***"
#: A credential shorter than this is not scrubbed by its value (it would mangle ordinary words); by name and shape
#: it still is.
MIN_SECRET_LENGTH = 6

# Every credential the process has read (configured inline, or read from the environment by an adapter): exact
# strings scrubbed from everything written or printed, whatever their shape or the name they came under.
_KNOWN: set[str] = set()
_KNOWN_ORDER: tuple[str, ...] = ()  # longest first, so a secret containing another is replaced whole
_KNOWN_LOCK = threading.Lock()


def register_secrets(values: Iterable[str | None]) -> None:
    """Remember credentials, process-wide, as they are read: from then on :func:`scrub_known` (and so
    :func:`redact_text`, :func:`redact_secrets`, the run folder's writers) replaces each wherever it appears.

    Example:
        >>> register_secrets(["plain-credential-42"])
        >>> redact_text("the key plain-credential-42 was refused")
        'the key *** was refused'
    """
    global _KNOWN_ORDER
    fresh = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_LENGTH} - _KNOWN
    if not fresh:
        return
    with _KNOWN_LOCK:
        _KNOWN.update(fresh)
        _KNOWN_ORDER = tuple(sorted(_KNOWN, key=len, reverse=True))


def known_secrets() -> tuple[str, ...]:
    """The credentials registered so far (longest first)."""
    return _KNOWN_ORDER


def scrub_known(value: Any) -> Any:
    """``value`` (text, or mappings and lists of it) with every registered credential replaced by ``***``."""
    known = _KNOWN_ORDER
    if not known:
        return value
    if isinstance(value, str):
        for secret in known:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, Mapping):
        return {scrub_known(k) if isinstance(k, str) else k: scrub_known(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_known(v) for v in value]
    return value


def _secret_name(name: str) -> bool:
    """Whether a setting's name says it holds a secret (``api_key``, ``access_token``; not ``max_tokens``, not
    ``api_key_env``, which names a variable)."""
    return bool(_SECRET_KEY.search(name)) and not _NOT_SECRET_KEY.search(name)


def redact_text(text: str) -> str:
    """``text`` without the registered credentials (:func:`register_secrets`), URL userinfo, credentials in a URL's
    query or given as ``name=value``, and anything shaped like a provider key, bearer token or JWT.

    Example:
        >>> redact_text("https://bob:hunter2@proxy.example/v1 with Bearer abcdefgh12345")
        'https://***@proxy.example/v1 with ***'
        >>> redact_text("GET https://x.openai.azure.com/chat?api-version=1&api-key=plainvalue failed")
        'GET https://x.openai.azure.com/chat?api-version=1&api-key=*** failed'
        >>> redact_text('provider_options = "api_key=plainvalue"')
        'provider_options = "api_key=***"'
    """
    text = scrub_known(text)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['name']}{REDACTED}", text)
    text = _ASSIGNED_SECRET.sub(lambda m: f"{m['name']}{m['q']}{REDACTED}", text)
    return _SECRET_VALUE.sub(REDACTED, text)


def redact_secrets(value: Any) -> Any:
    """``value`` with every secret replaced by ``***``: entries whose key names a secret (``api_key``, ``token``,
    ``password``, ...), everything under a headers key, URL userinfo, and values shaped like keys (``sk-...``,
    ``Bearer ...``). Names of environment variables that hold a secret (``api_key_env``) are kept: they are not
    secrets. Applied to everything a run writes that came from its configuration.
    """
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            name = str(k)
            if v is None or name.lower().endswith("_env"):
                out[k] = redact_secrets(v)
            elif _HEADERS_KEY.search(name) and isinstance(v, Mapping | list | tuple):
                out[k] = _all_redacted(v)
            elif _secret_name(name):
                out[k] = REDACTED
            else:
                out[k] = redact_secrets(v)
        return out
    if isinstance(value, list | tuple):
        return [redact_secrets(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _all_redacted(value: Any) -> Any:
    """Headers as a mapping or as a list of pairs: the names stay, every value goes."""
    if isinstance(value, Mapping):
        return {k: REDACTED for k in value}
    return [[item[0], REDACTED] if isinstance(item, list | tuple) and len(item) == 2 else REDACTED for item in value]


def describe_invalid(exc: ValidationError, where: str | None = None) -> str:
    """A validation error in words a person reads: each bad setting by its dotted path, what it expects, and the
    value given, unless the setting's name or the value looks secret (a key pasted into the wrong setting must not
    reach a log or a terminal). ``where`` (a file) closes the message.

    Example:
        >>> from pydantic import BaseModel, ConfigDict, ValidationError
        >>> class Params(BaseModel):
        ...     model_config = ConfigDict(extra="forbid")
        ...     temperature: float | None = None
        ...     api_key: int = 0
        >>> def check(**given):
        ...     try:
        ...         Params(**given)
        ...     except ValidationError as exc:
        ...         print(describe_invalid(exc, "eval.toml"))
        >>> check(temperature="hot")
        temperature: expected a number, got 'hot' (eval.toml)
        >>> check(api_key="sk-secret", top_p=1)
        2 invalid settings in eval.toml:
          api_key: expected a whole number
          top_p: unknown setting
    """
    phrases: dict[str, list[str]] = {}  # per setting: what it expects (a union setting: each member's)
    given: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        parts = [str(p) for p in err["loc"] if not _UNION_MEMBER.search(str(p))]
        path = ".".join(parts) or "(top level)"
        said = phrases.setdefault(path, [])
        if (phrase := _phrase(err)) not in said:
            said.append(phrase)
        value = err.get("input")
        if (
            err["type"] not in ("extra_forbidden", "missing")
            and isinstance(value, str | int | float | bool)
            and len(str(value)) <= 60
            and not any(_secret_name(p) for p in parts)
            and redact_text(str(value)) == str(value)
            and not _LOOKS_ASSIGNED.search(str(value))
        ):
            given.setdefault(path, f", got {value!r}")
    lines = [f"{path}: {' or '.join(said)}{given.get(path, '')}" for path, said in phrases.items()]
    if len(lines) == 1:
        return lines[0] + (f" ({where})" if where else "")
    head = f"{len(lines)} invalid settings" + (f" in {where}" if where else "") + ":"
    return "\n".join([head, *(f"  {line}" for line in lines)])


#: A value given as ``key=value`` pairs may be credentials typed into the wrong place (``"api_key=..."``): never
#: echoed, whatever the name.
_LOOKS_ASSIGNED = re.compile(r"(key|secret|token|password|passwd|auth|credential|sig)\w*\s*[=:]", re.IGNORECASE)
#: Parts of an error's location that name a member of a union type, not a setting.
_UNION_MEMBER = re.compile(r"[\[(]|^(str|int|float|bool|list|dict|tuple|function-\w+|lax-or-strict|[A-Z]\w+)$")


def _phrase(err: Any) -> str:
    """What a setting expects, for the common validation errors; pydantic's words otherwise."""
    kind, ctx = err["type"], err.get("ctx") or {}
    phrases = {
        "float_parsing": "expected a number",
        "float_type": "expected a number",
        "int_parsing": "expected a whole number",
        "int_type": "expected a whole number",
        "int_from_float": "expected a whole number",
        "bool_parsing": "expected true or false",
        "bool_type": "expected true or false",
        "string_type": "expected text",
        "missing": "required",
        "extra_forbidden": "unknown setting",
        "model_type": "expected a table of settings",
        "dict_type": "expected a table of settings",
        "model_attributes_type": "expected a table of settings",
        "list_type": "expected a list",
        "tuple_type": "expected a list",
    }
    if kind in phrases:
        return phrases[kind]
    if kind == "literal_error":
        return f"expected {ctx.get('expected', 'one of the allowed values')}"
    bounds = {"greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than"),
              "less_than_equal": ("le", "at most"), "less_than": ("lt", "less than")}  # fmt: skip
    if kind in bounds:
        key, words = bounds[kind]
        return f"must be {words} {ctx.get(key)}"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")
