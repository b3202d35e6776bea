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

__all__ = ["REDACTED", "describe_invalid", "redact_secrets"]

_SECRET_KEY = re.compile(r"(api[_-]?key|secret|token|password|passwd|authorization|credential)", re.IGNORECASE)
REDACTED = "***"


def redact_secrets(value: Any) -> Any:
    """``value`` with every entry whose key names a secret (``api_key``, ``token``, ...) replaced by ``***``.

    Names of environment variables that hold a secret (``api_key_env``) are kept: they are not secrets.
    """
    if isinstance(value, Mapping):
        return {
            k: REDACTED
            if _SECRET_KEY.search(str(k)) and not str(k).lower().endswith("_env") and v is not None
            else redact_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_secrets(v) for v in value]
    return value


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
