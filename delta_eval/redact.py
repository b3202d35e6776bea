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
#: Secrets recognised by their shape, wherever they are: keys of the major providers, Google OAuth access tokens,
#: AWS access key ids, bearer tokens, JWTs.
_SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|ya29\.[A-Za-z0-9._\-]{8,}|(?:AKIA|ASIA)[0-9A-Z]{16}|"
    r"(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}|"
    r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)"
)
#: The userinfo of a URL (``https://user:password@host``).
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s]+@")
REDACTED = "***"


def _secret_name(name: str) -> bool:
    """Whether a setting's name says it holds a secret (``api_key``, ``access_token``; not ``max_tokens``, not
    ``api_key_env``, which names a variable)."""
    return bool(_SECRET_KEY.search(name)) and not _NOT_SECRET_KEY.search(name)


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
        >>> from pydantic import BaseModel, ConfigDict
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
        ):
            given.setdefault(path, f", got {value!r}")
    lines = [f"{path}: {' or '.join(said)}{given.get(path, '')}" for path, said in phrases.items()]
    if len(lines) == 1:
        return lines[0] + (f" ({where})" if where else "")
    head = f"{len(lines)} invalid settings" + (f" in {where}" if where else "") + ":"
    return "\n".join([head, *(f"  {line}" for line in lines)])


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
