"""Personal data replaced by fake values of the same shape, as conversations are read (before replay and judging).

Detectors find emails, phone numbers, card numbers (Luhn-valid only), IBANs (mod-97-valid only), Brazilian CPF and
CNPJ numbers (valid check digits only), US SSNs, IPv4 and IPv6 addresses, the user's own patterns and the values of
named metadata fields, in every text a conversation holds: its messages, media URLs and filenames (never media
bytes). Each real value becomes a fake one drawn from ``HMAC(salt, kind, value)``: the same real
value always gets the same fake value under one salt, wherever it appears (messages, tool-call arguments, tool
results, metadata), so recorded tool results still match the calls a replay makes. Fakes keep the shape and the
check digits: a fake card is Luhn-valid with the same length and separators, a fake IBAN keeps its country and
length and is mod-97-valid, a fake CPF has valid check digits.

Example:
    >>> from delta_eval.mapping import Pseudonymize
    >>> p = Pseudonymizer(Pseudonymize(salt="demo"))
    >>> fake = p.text("mail mia@shop.com or call +1 415-555-0100")
    >>> "mia@shop.com" in fake, fake == p.text("mail mia@shop.com or call +1 415-555-0100")
    (False, True)
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import random
import re
import secrets
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from delta_eval.mapping import Pseudonymize
from delta_eval.paths import MISSING, get_path
from delta_eval.schema import Conversation, MediaPart, Message, ToolCall

__all__ = ["Pseudonymizer", "cnpj_valid", "cpf_valid", "iban_valid", "luhn_valid"]


# --- check digits -------------------------------------------------------------------------------------------------


def luhn_valid(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check (card numbers).

    Example:
        >>> luhn_valid("4111111111111111"), luhn_valid("4111111111111112")
        (True, False)
    """
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _luhn_digit(body: str) -> str:
    return next(d for d in string.digits if luhn_valid(body + d))


def _iban_number(iban: str) -> int:
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved))


def iban_valid(iban: str) -> bool:
    """Whether an IBAN (separators removed) passes the mod-97 check.

    Example:
        >>> iban_valid("GB82WEST12345698765432"), iban_valid("GB82WEST12345698765433")
        (True, False)
    """
    return bool(re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", iban)) and _iban_number(iban) % 97 == 1


def _cpf_digits(body: str) -> str:
    # The two check digits of a CPF: weights 10..2 then 11..2, remainder mod 11 (0 when below 2).
    out = body
    for start in (10, 11):
        total = sum(int(d) * w for d, w in zip(out, range(start, 1, -1), strict=False))
        r = total % 11
        out += "0" if r < 2 else str(11 - r)
    return out[-2:]


def cpf_valid(digits: str) -> bool:
    """Whether 11 digits are a CPF with valid check digits (a run of one digit is not).

    Example:
        >>> cpf_valid("52998224725"), cpf_valid("52998224726")
        (True, False)
    """
    return len(digits) == 11 and len(set(digits)) > 1 and _cpf_digits(digits[:9]) == digits[9:]


def _cnpj_digits(body: str) -> str:
    out = body
    for weights in ((5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2), (6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2)):
        r = sum(int(d) * w for d, w in zip(out, weights, strict=True)) % 11
        out += "0" if r < 2 else str(11 - r)
    return out[-2:]


def cnpj_valid(digits: str) -> bool:
    """Whether 14 digits are a CNPJ with valid check digits.

    Example:
        >>> cnpj_valid("11222333000181"), cnpj_valid("11222333000182")
        (True, False)
    """
    return len(digits) == 14 and len(set(digits)) > 1 and _cnpj_digits(digits[:12]) == digits[12:]


# --- generators: each keeps the shape of the value it replaces ----------------------------------------------------


def _digit(rng: random.Random, first: bool = False) -> str:
    return str(rng.randint(1, 9)) if first else str(rng.randint(0, 9))


def _same_shape(value: str, rng: random.Random) -> str:
    """A digit for each digit, a letter of the same case for each letter; everything else kept."""
    out = []
    for i, ch in enumerate(value):
        if ch.isdigit():
            # A leading non-zero digit stays non-zero: a number in JSON text must not start with 0.
            out.append(_digit(rng, first=ch != "0" and (i == 0 or not value[i - 1].isdigit())))
        elif ch.isupper():
            out.append(rng.choice(string.ascii_uppercase))
        elif ch.islower():
            out.append(rng.choice(string.ascii_lowercase))
        else:
            out.append(ch)
    return "".join(out)


def _with_digits(layout: str, digits: str) -> str:
    """``layout`` with its digits replaced, in order, by ``digits`` (separators kept)."""
    it = iter(digits)
    return "".join(next(it) if ch.isdigit() else ch for ch in layout)


def _fake_card(value: str, rng: random.Random) -> str:
    n = sum(ch.isdigit() for ch in value)
    first = next(ch for ch in value if ch.isdigit())  # the network (4 Visa, 5 Mastercard) is no one's data
    body = first + "".join(_digit(rng) for _ in range(n - 2))
    return _with_digits(value, body + _luhn_digit(body))


def _fake_iban(value: str, rng: random.Random) -> str:
    compact = value.replace(" ", "")
    country = compact[:2]
    bban = "".join(
        rng.choice(string.ascii_uppercase) if ch.isalpha() else _digit(rng) for ch in compact[4:]
    )  # the bank code's letters stay letters, digits stay digits: the country's format is kept
    check = 98 - _iban_number(country + "00" + bban) % 97
    fake = iter(f"{country}{check:02d}{bban}")
    return "".join(ch if ch == " " else next(fake) for ch in value)


def _fake_cpf(value: str, rng: random.Random) -> str:
    while len(set(body := "".join(_digit(rng) for _ in range(9)))) < 2:
        pass
    return _with_digits(value, body + _cpf_digits(body))


def _fake_cnpj(value: str, rng: random.Random) -> str:
    body = "".join(_digit(rng) for _ in range(8)) + "0001"
    return _with_digits(value, body + _cnpj_digits(body))


def _fake_ssn(value: str, rng: random.Random) -> str:
    # Area 001-665 or 667-899, group 01-99, serial 0001-9999: shaped like an issued number.
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


def _fake_email(value: str, rng: random.Random) -> str:
    local, domain = value.rsplit("@", 1)
    labels = domain.split(".")
    fake_labels = [_letters(len(label), rng) for label in labels[:-1]] + [labels[-1]]  # the TLD says little
    return f"{_letters(len(local), rng)}@{'.'.join(fake_labels)}"


def _letters(n: int, rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(max(n, 1)))


def _fake_phone(value: str, rng: random.Random) -> str:
    return _same_shape(value, rng)


def _fake_ipv4(value: str, rng: random.Random) -> str:
    return ".".join(str(rng.randint(1, 254)) for _ in range(4))


def _fake_ipv6(value: str, rng: random.Random) -> str:
    hexdigits = "0123456789abcdef"
    return "".join(rng.choice(hexdigits) if ch in string.hexdigits else ch for ch in value)


# --- detectors ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    valid: Callable[[str], bool]
    fake: Callable[[str, random.Random], str]


def _digits(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


def _ip_valid(version: int) -> Callable[[str], bool]:
    def valid(value: str) -> bool:
        try:
            return ipaddress.ip_address(value).version == version
        except ValueError:
            return False

    return valid


def _phone_valid(value: str) -> bool:
    if re.match(r"\d{4}[-./]\d{2}[-./]\d{2}", value):
        return False  # a date, perhaps followed by a time
    n = len(_digits(value))
    # Ten digits or more, or an international prefix: shorter runs are more often dates, amounts or order numbers.
    return 10 <= n <= 15 or (value.startswith("+") and 8 <= n <= 15)


def _ssn_valid(value: str) -> bool:
    area, group, serial = value.split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


_B = r"(?<![\w@.+-])"  # the start of a token: not inside a longer word, number, address or email
_E = r"(?![\w@:]|[.-]\w)"  # its end (a time's "12:30" is not the end of a number)

#: In order of precedence: where two overlap, the earlier kind claims the text (a card before a phone number).
_DETECTORS = (
    _Detector(
        "email",
        re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b"),
        lambda v: True,
        _fake_email,
    ),
    _Detector(
        "iban",
        re.compile(_B + r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}" + _E),
        lambda v: iban_valid(v.replace(" ", "")),
        _fake_iban,
    ),
    _Detector("card", re.compile(_B + r"\d(?:[ -]?\d){12,18}" + _E), lambda v: luhn_valid(_digits(v)), _fake_card),
    _Detector(
        "cnpj",
        re.compile(_B + r"\d{2}\.?\d{3}\.?\d{3}/?\d{4}-?\d{2}" + _E),
        lambda v: cnpj_valid(_digits(v)),
        _fake_cnpj,
    ),
    _Detector("cpf", re.compile(_B + r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}" + _E), lambda v: cpf_valid(_digits(v)), _fake_cpf),
    _Detector("ssn", re.compile(_B + r"\d{3}-\d{2}-\d{4}" + _E), _ssn_valid, _fake_ssn),
    _Detector(
        "ipv6", re.compile(r"(?<![\w:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])"), _ip_valid(6), _fake_ipv6
    ),
    _Detector("ipv4", re.compile(_B + r"\d{1,3}(?:\.\d{1,3}){3}" + _E), _ip_valid(4), _fake_ipv4),
    _Detector(
        "phone",
        re.compile(r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,5}(?:[ .-]?\d{2,5}){1,5}" + _E),
        _phone_valid,
        _fake_phone,
    ),
)


def _valid_match(d: _Detector, text: str, m: re.Match[str]) -> re.Match[str] | None:
    """``m`` when it passes its check, else its longest shorter form that does, cut at a separator: a run of digits
    that fails may hold a valid value followed by more (a card and its expiry, ``4111 1111 1111 1111 12/26``)."""
    if d.valid(m.group()):
        return m
    for end in range(m.end() - 1, m.start(), -1):
        if text[end] in " -.":
            short = d.pattern.match(text, m.start(), end)
            if short is not None and short.end() == end and d.valid(short.group()):
                return short
    return None


# --- the transform ------------------------------------------------------------------------------------------------


def _whole(value: str) -> str:
    """A pattern finding ``value`` only as a whole word where it starts or ends with one: the name "Mia" is not
    the start of "Miami".

    Example:
        >>> [m.start() for m in re.finditer(_whole("Mia"), "Mia flew to Miami; ask Mia.")]
        [0, 23]
    """
    head = r"(?<!\w)" if re.match(r"\w", value[0]) else ""
    tail = r"(?!\w)" if re.match(r"\w", value[-1]) else ""
    return f"{head}{re.escape(value)}{tail}"


class Pseudonymizer:
    """Replaces personal data as a :class:`~delta_eval.mapping.Pseudonymize` describes; one per source.

    ``mapping`` collects, for what was replaced, the salted sha256 of the real value -> ``(fake, kind)`` (what
    ``keep_mapping`` writes; never the real value).

    Example:
        >>> p = Pseudonymizer(Pseudonymize(kinds=["card"], salt="s"))
        >>> fake = p.text("card 4111 1111 1111 1111")
        >>> fake != "card 4111 1111 1111 1111", luhn_valid(fake[5:].replace(" ", "")), len(fake)
        (True, True, 24)
    """

    def __init__(self, config: Pseudonymize) -> None:
        self.config = config
        # No salt given: a random one for this source, so that the fakes cannot be recomputed from the real values.
        self._key = (config.salt if config.salt is not None else secrets.token_hex(16)).encode()
        # The user's own patterns first: where one overlaps a built-in kind, the user's word wins.
        self._detectors = [
            _Detector("pattern", re.compile(p), lambda v: True, _same_shape) for p in config.patterns
        ] + [d for d in _DETECTORS if d.kind in config.kinds]
        self._fakes: dict[tuple[str, str], str] = {}
        self.mapping: dict[str, tuple[str, str]] = {}

    def hash(self, value: str) -> str:
        """The salted sha256 of a real value, as ``keep_mapping`` records it."""
        return hmac.new(self._key, value.encode(), hashlib.sha256).hexdigest()

    def fake(self, kind: str, value: str, make: Callable[[str, random.Random], str] = _same_shape) -> str:
        """The fake value of ``value`` (of ``kind``): the same for the same value under one salt."""
        if (kind, value) not in self._fakes:
            seed = hmac.new(self._key, f"{kind}\0{value}".encode(), hashlib.sha256).digest()
            fake = make(value, random.Random(seed))
            self._fakes[kind, value] = fake
            self.mapping[self.hash(value)] = (fake, kind)
        return self._fakes[kind, value]

    def text(self, text: str, known: Iterable[tuple[str, str]] = ()) -> str:
        """``text`` with each detected value (and each of ``known``'s ``(kind, value)``) replaced."""
        spans: list[tuple[int, int, str]] = []

        def free(start: int, end: int) -> bool:
            return all(end <= s or start >= e for s, e, _ in spans)

        for kind, value in known:  # metadata values named by ``fields`` first: the user said they are personal
            if value:
                for m in re.finditer(_whole(value), text):
                    if free(m.start(), m.end()):
                        spans.append((m.start(), m.end(), self.fake(kind, value)))
        for d in self._detectors:
            for found in d.pattern.finditer(text):
                valid = _valid_match(d, text, found)
                # Only a value no earlier kind claimed gets a fake (and a row in ``mapping``) of this kind.
                if valid is not None and free(valid.start(), valid.end()):
                    spans.append((valid.start(), valid.end(), self.fake(d.kind, valid.group(), d.fake)))
        out, last = [], 0
        for start, end, fake in sorted(spans):
            out += [text[last:start], fake]
            last = end
        return "".join(out) + text[last:]

    def _json_text(self, text: str, known: list[tuple[str, str]]) -> str:
        """Text that may be JSON (tool-call arguments, a tool's result): replaced in place, keeping its layout, and
        then inside each parsed string too, for a value the text writes with escapes (``\\u0040``, ``\\"``)."""
        fake = self.text(text, known)
        if text.lstrip()[:1] not in ("{", "["):
            return fake
        try:
            parsed = json.loads(text)
        except ValueError:
            return fake  # not JSON to begin with: nothing to keep valid
        walked = self._value(parsed, known)
        try:
            if json.loads(fake) == walked:
                return fake  # the replacement in place found every value: the recorded layout is kept
        except ValueError:
            pass  # a replacement broke the JSON
        return json.dumps(walked, ensure_ascii=False)

    def _value(self, value: Any, known: list[tuple[str, str]]) -> Any:
        if isinstance(value, str):
            return self.text(value, known)
        if isinstance(value, list):
            return [self._value(v, known) for v in value]
        if isinstance(value, dict):
            return {k: self._value(v, known) for k, v in value.items()}
        if isinstance(value, int) and not isinstance(value, bool):
            fake = self.text(str(value), known)  # a card or phone number written as a JSON number
            return int(fake) if fake != str(value) and fake.isdigit() else value
        return value

    def conversation(self, conv: Conversation) -> Conversation:
        """``conv`` with its personal data replaced in messages, tool-call arguments, tool results and metadata.

        Example:
            >>> from delta_eval.schema import Message
            >>> p = Pseudonymizer(Pseudonymize(fields=["user.name"], salt="s"))
            >>> conv = Conversation(id="c", metadata={"user": {"name": "Mia Wong"}}, messages=(
            ...     Message(role="user", content="I am Mia Wong"),))
            >>> out = p.conversation(conv)
            >>> out.messages[0].content == "I am " + out.metadata["user"]["name"], "Mia" in str(out)
            (True, False)
        """
        known = []
        for path in self.config.fields:
            value = get_path(conv.metadata, path)
            if value is not MISSING and value is not None and str(value):
                known.append(("field", str(value)))
        known.sort(key=lambda kv: -len(kv[1]))  # a longer value first: "Mia Wong" before "Mia"
        messages = tuple(self._message(m, known) for m in conv.messages)
        metadata = self._value(conv.metadata, known)
        # What each recorded call was sent holds the same values: replaced alike, so its replay matches the messages.
        calls = tuple(
            call.model_copy(
                update={
                    "system": None if call.system is None else self._json_text(call.system, known),
                    "input": None if call.input is None else tuple(self._message(m, known) for m in call.input),
                }
            )
            for call in conv.calls
        )
        # An id (and the record label that names it) may be an email or a phone number too.
        return conv.model_copy(
            update={
                "messages": messages,
                "calls": calls,
                "metadata": metadata,
                "id": self.text(conv.id, known),
                "record": self.text(conv.record, known),
            }
        )

    def _message(self, message: Message, known: list[tuple[str, str]]) -> Message:
        update: dict[str, Any] = {}
        if message.content:
            update["content"] = self._json_text(message.content, known)
        if message.tool_calls:
            update["tool_calls"] = tuple(
                call.model_copy(update={"arguments": self._json_text(call.arguments, known)})
                if isinstance(call, ToolCall)
                else call
                for call in message.tool_calls
            )
        if message.reasoning is not None and message.reasoning.summary:
            # The summary is text a judge may read; the provider's opaque (often signed) data cannot be changed.
            reasoning = message.reasoning.model_copy(update={"summary": self.text(message.reasoning.summary, known)})
            update["reasoning"] = reasoning
        if message.name and message.role != "tool":  # a participant's name (a tool message names its tool)
            update["name"] = self.text(message.name, known)
        if message.media:
            update["media"] = tuple(self._media(p, known) for p in message.media)
        return message.model_copy(update=update) if update else message

    def _media(self, part: MediaPart, known: list[tuple[str, str]]) -> MediaPart:
        # The bytes are left whole (base64 is no text to rewrite, and a changed byte would break the file); a URL and
        # a filename are text that may name a person (an email in a signed link), and a changed URL is a new part.
        url = self.text(part.url, known) if part.url and not part.url.startswith("data:") else part.url
        name = self.text(part.filename, known) if part.filename else part.filename
        if url == part.url and name == part.filename:
            return part
        if url != part.url and url is not None:
            return MediaPart.from_url(part.kind, url, part.media_type, filename=name)
        return part.model_copy(update={"filename": name})
