"""The fake servers' rules for media parts, written from each provider's documentation (not from the adapters):
a request whose image, file or audio part is malformed is refused with a 400, as the real service refuses it.

- Chat Completions (a user message's content parts): ``text``; ``image_url`` with ``image_url.url`` an ``http(s)``
  URL or a ``data:image/{png,jpeg,gif,webp};base64,`` URL, and ``detail`` ``auto``, ``low`` or ``high`` if given;
  ``input_audio`` with base64 ``data`` and ``format`` ``wav`` or ``mp3``; ``file`` with ``file_data`` (a base64
  ``data:`` URL) or ``file_id``. System, developer and tool messages take text parts only.
- Responses (a message's content): ``input_text``; ``input_image`` with ``detail`` and an ``image_url`` (``http(s)``
  or ``data:image/...;base64,``) or a ``file_id``; ``input_file`` with ``file_data`` (a base64 ``data:`` URL),
  ``file_url`` or ``file_id``.
- Messages (Anthropic): ``image`` with a ``base64`` source (``media_type`` ``image/jpeg``, ``image/png``,
  ``image/gif`` or ``image/webp``, base64 ``data``), a ``url`` source or a ``file`` source; ``document`` with a
  ``base64`` source of ``application/pdf``, a ``text`` source of ``text/plain``, a ``url`` or ``file`` source; a
  ``tool_result``'s content holds ``text``, ``image`` and ``document`` blocks.
- Gemini: a part holds one kind of data; ``inlineData`` needs ``mimeType`` and base64 ``data`` (either alphabet, as
  Google's JSON mapping of bytes), ``fileData`` needs ``fileUri`` and ``mimeType``.

Example:
    >>> check_chat_part({"type": "image_url", "image_url": {"url": "ftp://x"}}, "messages[0].content[0]")
    Traceback (most recent call last):
    ...
    delta_eval.testing.servers.provider.WireError: Invalid 'messages[0].content[0].image_url.url': expected an \
http(s) URL or a base64 data URL of an image (image/png, image/jpeg, image/gif, image/webp).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from delta_eval.testing.servers.provider import WireError

__all__ = [
    "check_anthropic_block",
    "check_chat_part",
    "check_gemini_part",
    "check_responses_part",
]

_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)
_GEMINI_DATA = ("text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
                "codeExecutionResult")  # fmt: skip


def _base64(value: Any, *, url_safe: bool = False) -> bool:
    if not isinstance(value, str) or not value:
        return False
    if url_safe:  # Google's JSON mapping of bytes takes either alphabet, padded or not
        value = value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4)
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _http(value: Any) -> bool:
    return isinstance(value, str) and re.match(r"^https?://[^\s/]+", value) is not None


def _data_url(value: Any, types: tuple[str, ...] | None = None) -> bool:
    match = _DATA_URL.match(value) if isinstance(value, str) else None
    return match is not None and (types is None or match["type"] in types) and _base64(match["data"])


def _image_url(value: Any, where: str) -> None:
    if not (_http(value) or _data_url(value, _IMAGE_TYPES)):
        raise WireError(
            f"Invalid '{where}': expected an http(s) URL or a base64 data URL of an image ({', '.join(_IMAGE_TYPES)}).",
            param=where,
            code="invalid_image_url",
        )


def check_chat_part(part: Any, where: str, *, text_only: bool = False) -> None:
    """Refuse a malformed Chat Completions content part (``text_only``: a system, developer or tool message)."""
    kind = part.get("type") if isinstance(part, dict) else None
    allowed = ("text",) if text_only else ("text", "image_url", "input_audio", "file")
    if kind not in allowed:
        supported = ", ".join(repr(k) for k in allowed)
        raise WireError(f"Invalid value: {kind!r}. Supported values are: {supported}.", param=f"{where}.type")
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise WireError(f"Missing required parameter: '{where}.text'.", param=f"{where}.text")
        return
    body = part.get(kind)
    if not isinstance(body, dict):
        raise WireError(f"Missing required parameter: '{where}.{kind}'.", param=f"{where}.{kind}")
    if kind == "image_url":
        _image_url(body.get("url"), f"{where}.image_url.url")
        if body.get("detail", "auto") not in ("auto", "low", "high"):
            raise WireError(f"Invalid value for '{where}.image_url.detail'.", param=f"{where}.image_url.detail")
    elif kind == "input_audio":
        if body.get("format") not in ("wav", "mp3"):
            raise WireError(f"Invalid value for '{where}.input_audio.format': expected 'wav' or 'mp3'.")
        if not _base64(body.get("data")):
            raise WireError(f"Invalid '{where}.input_audio.data': expected base64-encoded audio.")
    elif not (_data_url(body.get("file_data")) or isinstance(body.get("file_id"), str)):
        raise WireError(f"Invalid '{where}.file': expected file_data (a base64 data URL) or a file_id.")


def check_responses_part(part: Any, where: str) -> None:
    """Refuse a malformed Responses input content part (text parts are the caller's to read)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "input_image":
        if part.get("detail") not in ("auto", "low", "high"):
            raise WireError(f"Missing or invalid required parameter: '{where}.detail'.", param=f"{where}.detail")
        if part.get("image_url") is None and isinstance(part.get("file_id"), str):
            return
        _image_url(part.get("image_url"), f"{where}.image_url")
    elif kind == "input_file":
        if not (
            _data_url(part.get("file_data")) or _http(part.get("file_url")) or isinstance(part.get("file_id"), str)
        ):
            raise WireError(
                f"Invalid '{where}': an input_file needs file_data (a base64 data URL), file_url or file_id."
            )
    elif kind not in ("input_text", "output_text", "refusal"):
        raise WireError(
            f"Invalid value: {kind!r}. Supported values are: 'input_text', 'input_image', 'input_file', 'output_text' "
            "and 'refusal'.",
            param=f"{where}.type",
        )


def _source(block: dict[str, Any], where: str, media_types: tuple[str, ...], *, text: bool) -> None:
    raw = block.get("source")
    source: dict[str, Any] = raw if isinstance(raw, dict) else {}
    kind = source.get("type")
    if kind == "base64":
        if source.get("media_type") not in media_types:
            raise WireError(f"{where}.source.media_type: Input should be {' or '.join(map(repr, media_types))}")
        if not _base64(source.get("data")):
            raise WireError(f"{where}.source.data: the base64 data is invalid")
    elif kind == "url":
        if not _http(source.get("url")):
            raise WireError(f"{where}.source.url: Input should be a valid http(s) URL")
    elif kind == "file":
        if not isinstance(source.get("file_id"), str):
            raise WireError(f"{where}.source.file_id: Field required")
    elif kind == "text" and text:
        if source.get("media_type") != "text/plain" or not isinstance(source.get("data"), str):
            raise WireError(f"{where}.source: a text source needs media_type 'text/plain' and its data")
    else:
        raise WireError(f"{where}.source.type: Input tag {kind!r} does not match any of the expected tags")


def check_anthropic_block(block: Any, where: str, *, in_tool_result: bool = False) -> None:
    """Refuse a malformed ``image`` or ``document`` block (other blocks are the caller's), or, in a tool result's
    content, a block that is not text, image or document."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "image":
        _source(block, where, ("image/jpeg", "image/png", "image/gif", "image/webp"), text=False)
    elif kind == "document":
        _source(block, where, ("application/pdf",), text=True)
    elif in_tool_result and kind != "text":
        raise WireError(f"{where}.type: a tool_result's content holds text, image and document blocks, not {kind!r}")


def check_gemini_part(part: Any, where: str) -> None:
    """Refuse a Gemini part with more than one kind of data, or malformed ``inlineData`` / ``fileData``."""
    if not isinstance(part, dict):
        raise WireError(f"Invalid JSON payload received. {where}: a part must be an object.")
    present = [k for k in _GEMINI_DATA if k in part]
    if len(present) > 1:
        raise WireError(f"Invalid value at '{where}' (oneof field 'data' is already set. Cannot set '{present[1]}')")
    inline, file = part.get("inlineData"), part.get("fileData")
    if inline is not None and (not isinstance(inline, dict) or not isinstance(inline.get("mimeType"), str)
                               or not _base64(inline.get("data"), url_safe=True)):  # fmt: skip
        raise WireError(f"Invalid value at '{where}.inline_data': needs mime_type and base64 data")
    if file is not None and (not isinstance(file, dict) or not isinstance(file.get("fileUri"), str)
                             or not isinstance(file.get("mimeType"), str)):  # fmt: skip
        raise WireError(f"Invalid value at '{where}.file_data': needs file_uri and mime_type")
