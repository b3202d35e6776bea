"""Keep secrets out of everything a run writes: manifests, reports and error messages.

Example:
    >>> redact_secrets({"api_key": "sk-123", "api_key_env": "OPENAI_API_KEY", "base_url": "http://x"})
    {'api_key': '***', 'api_key_env': 'OPENAI_API_KEY', 'base_url': 'http://x'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

__all__ = ["REDACTED", "describe_invalid", "redact_secrets", "redact_text"]

#: Keys whose value is a secret wherever they appear (provider options, ``params.extra``, a judge's options).
_SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|token|password|passwd|authori[sz]ation|credential|cookie|signature|private[_-]?key|"
    r"bearer|session[_-]?id|^auth$|^key$)",
    re.IGNORECASE,
)
#: Keys that name a secret's word but count something else (``max_tokens``, ``thinking_budget_tokens``).
_NOT_SECRET_KEY = re.compile(r"(tokens|^max_|budget|_field$|_env$)", re.IGNORECASE)
#: Keys that hold HTTP headers: every value under them is secret (a header may carry any token).
_HEADERS_KEY = re.compile(r"headers?$", re.IGNORECASE)
#: Secrets recognised by their shape, wherever they are: keys of the major providers, bearer tokens, JWTs.
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}|"
    r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)"
)
#: The userinfo of a URL (``https://user:password@host``).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s]+@")
REDACTED = "***"


def redact_text(text: str) -> str:
    """``text`` without URL userinfo and without anything shaped like a provider key, bearer token or JWT.

    Example:
        >>> redact_text("https://bob:hunter2@proxy.example/v1 with Bearer abcdefgh12345")
        'https://***@proxy.example/v1 with ***'
    """
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
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
            elif _SECRET_KEY.search(name) and not _NOT_SECRET_KEY.search(name):
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


def describe_invalid(exc: ValidationError) -> str:
    """A validation error as text that names each bad field and what is wrong with it, but never the value given:
    a key pasted into the wrong setting must not reach a log or a terminal.

    Example:
        >>> from pydantic import BaseModel, ConfigDict
        >>> class Options(BaseModel):
        ...     model_config = ConfigDict(extra="forbid")
        ...     base_url: str = ""
        >>> try:
        ...     Options(api_key="sk-secret")
        ... except ValidationError as exc:
        ...     print(describe_invalid(exc))
        1 invalid setting in Options:
          api_key: Extra inputs are not permitted
    """
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    lines = [f"{len(errors)} invalid setting{'s' if len(errors) != 1 else ''} in {exc.title}:"]
    for err in errors:
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']}")
    return "\n".join(lines)
