"""Personal data is replaced at ingest by same-shaped fakes, deterministically, and never reaches the run folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_eval as de
from delta_eval.config import load_config
from delta_eval.ingest.pseudonymize import Pseudonymizer, cnpj_valid, cpf_valid, iban_valid, luhn_valid
from delta_eval.ingest.source import ConversationSource
from delta_eval.schema import Message, ToolCall

digits = st.text(alphabet="0123456789", min_size=1, max_size=1)


def only(kind: str, salt: str = "s") -> Pseudonymizer:
    return Pseudonymizer(de.Pseudonymize(kinds=[kind], salt=salt))


def shape(text: str) -> str:
    return re.sub(r"[a-z]", "a", re.sub(r"[A-Z]", "A", re.sub(r"\d", "0", text)))


def with_luhn(body: str) -> str:
    return body + next(d for d in "0123456789" if luhn_valid(body + d))


@settings(max_examples=60, deadline=None)
@given(
    body=st.text("0123456789", min_size=15, max_size=15).map(lambda b: "4" + b[1:]), sep=st.sampled_from(["", " ", "-"])
)
def test_a_card_becomes_a_luhn_valid_card_of_the_same_layout(body: str, sep: str) -> None:
    number = with_luhn(body)
    written = sep.join(number[i : i + 4] for i in range(0, 16, 4))
    fake = only("card").text(f"card {written}.")[5:-1]
    assert fake != written
    assert shape(fake) == shape(written)
    assert luhn_valid(fake.replace(sep, "") if sep else fake)


@settings(max_examples=60, deadline=None)
@given(body=st.text("0123456789", min_size=16, max_size=16))
def test_a_sixteen_digit_number_failing_luhn_is_left_alone(body: str) -> None:
    if luhn_valid(body):
        body = body[:-1] + str((int(body[-1]) + 1) % 10)
    assert only("card").text(f"ref {body}") == f"ref {body}"


@settings(max_examples=60, deadline=None)
@given(bban=st.text("0123456789", min_size=18, max_size=18), spaced=st.booleans())
def test_an_iban_keeps_country_and_length_and_is_mod97_valid(bban: str, spaced: bool) -> None:
    iban = f"DE{98 - int(bban + '131400') % 97:02d}{bban}"
    assert iban_valid(iban)
    written = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)) if spaced else iban
    fake = only("iban").text(written)
    assert fake != written
    assert shape(fake) == shape(written)
    assert fake[:2] == "DE"
    assert iban_valid(fake.replace(" ", ""))


@settings(max_examples=60, deadline=None)
@given(body=st.text("0123456789", min_size=9, max_size=9), formatted=st.booleans())
def test_a_cpf_becomes_a_cpf_with_valid_check_digits(body: str, formatted: bool) -> None:
    from delta_eval.ingest.pseudonymize import _cpf_digits

    cpf = body + _cpf_digits(body)
    if not cpf_valid(cpf):
        return  # one digit repeated: not a CPF
    written = f"{cpf[:3]}.{cpf[3:6]}.{cpf[6:9]}-{cpf[9:]}" if formatted else cpf
    fake = only("cpf").text(f"CPF {written}")[4:]
    assert fake != written
    assert shape(fake) == shape(written)
    assert cpf_valid(re.sub(r"\D", "", fake))
    wrong = cpf[:10] + str((int(cpf[10]) + 1) % 10)
    assert only("cpf").text(wrong) == wrong


def test_a_cnpj_ssn_and_addresses_keep_their_shape() -> None:
    p = Pseudonymizer(de.Pseudonymize(salt="s"))
    cnpj = p.text("11.222.333/0001-81")
    assert shape(cnpj) == shape("11.222.333/0001-81")
    assert cnpj_valid(re.sub(r"\D", "", cnpj))
    assert cnpj[:2] != "11"
    assert re.fullmatch(r"\d{3}-\d{2}-\d{4}", ssn := p.text("123-45-6789"))
    assert ssn != "123-45-6789"
    import ipaddress

    assert ipaddress.ip_address(v4 := p.text("10.20.30.40")).version == 4
    assert v4 != "10.20.30.40"
    assert ipaddress.ip_address(v6 := p.text("2001:db8::1")).version == 6
    assert v6 != "2001:db8::1"
    assert p.text("at 12:30:45 on 2024-01-15") == "at 12:30:45 on 2024-01-15"


@settings(max_examples=60, deadline=None)
@given(
    local=st.from_regex(r"[a-z][a-z0-9.]{0,10}[a-z]", fullmatch=True),
    domain=st.from_regex(r"[a-z]{2,10}", fullmatch=True),
    tld=st.sampled_from(["com", "org", "com.br"]),
)
def test_an_email_keeps_the_form_local_at_domain_tld(local: str, domain: str, tld: str) -> None:
    email = f"{local}@{domain}.{tld}"
    fake = only("email").text(f"write to {email}, thanks")[9:-8]
    assert fake != email
    assert re.fullmatch(r"[a-z]+@[a-z]+(\.[a-z]+)*\." + tld.split(".")[-1], fake)


@settings(max_examples=60, deadline=None)
@given(
    parts=st.tuples(*(st.text("0123456789", min_size=n, max_size=n) for n in (3, 3, 4))),
    sep=st.sampled_from([" ", "-", "."]),
    plus=st.booleans(),
)
def test_a_phone_keeps_its_digit_layout_and_separators(parts: tuple[str, ...], sep: str, plus: bool) -> None:
    phone = ("+55 " if plus else "") + sep.join(parts)
    fake = only("phone").text(f"call {phone} now")[5:-4]
    assert shape(fake) == shape(phone)
    assert fake != phone


EMAIL_V = "ana.silva@empresa.com.br"
VALUES = [
    EMAIL_V,
    "4111 1111 1111 1111",
    "529.982.247-25",
    "+55 11 98765-4321",
    "GB82 WEST 1234 5698 7654 32",
    "11.222.333/0001-81",
    "123-45-6789",
    "192.168.10.7",
    "2001:db8::42",
]


@settings(max_examples=60, deadline=None)
@given(
    picks=st.lists(st.sampled_from(VALUES), min_size=1, max_size=6),
    filler=st.lists(st.sampled_from(["hello", "my data:", "and", "again", ";", "(ok)"]), min_size=6, max_size=6),
    salt=st.text(min_size=1, max_size=8),
)
def test_every_value_is_replaced_and_each_always_by_the_same_fake(
    picks: list[str], filler: list[str], salt: str
) -> None:
    p = Pseudonymizer(de.Pseudonymize(salt=salt))
    text = " ".join(f"{f} {v}" for f, v in zip(filler, picks, strict=False))
    fake = p.text(text)
    assert not [v for v in picks if v in fake]
    assert fake == p.text(text) == Pseudonymizer(de.Pseudonymize(salt=salt)).text(text)
    # Each value alone gets the fake it got in the longer text: one fake per value, wherever it is.
    for v in picks:
        assert p.text(v) in fake


def test_a_valid_value_followed_by_more_digits_or_letters_is_still_found() -> None:
    p = Pseudonymizer(de.Pseudonymize(salt="s"))
    card = p.text("card 4111 1111 1111 1111 12/26")
    assert "4111 1111 1111 1111" not in card
    assert card.endswith(" 12/26")
    assert luhn_valid(card[5:24].replace(" ", ""))
    iban = p.text("IBAN GB82 WEST 1234 5698 7654 32 UK")
    assert "GB82 WEST" not in iban
    assert iban.endswith(" UK")
    assert iban_valid(iban[5:-3].replace(" ", ""))


def test_a_user_pattern_wins_over_a_built_in_kind_and_ids_are_replaced() -> None:
    p = Pseudonymizer(de.Pseudonymize(patterns=[r"CUST-\d{10}"], salt="s"))
    assert re.fullmatch(r"[A-Z]{4}-\d{10}", out := p.text("CUST-4155550100"))
    assert p.mapping[p.hash("CUST-4155550100")] == (out, "pattern")
    conv = de.Conversation(id=EMAIL_V, record=f"line 3 (id {EMAIL_V})", messages=(Message(role="user", content="hi"),))
    done = p.conversation(conv)
    assert EMAIL_V not in done.id + done.record
    assert done.record == f"line 3 (id {done.id})"


def test_user_patterns_and_metadata_fields_are_replaced_everywhere() -> None:
    p = Pseudonymizer(de.Pseudonymize(kinds=[], patterns=[r"ACME-\d{6}"], fields=["user.name"], salt="s"))
    conv = de.Conversation(
        id="c",
        metadata={"user": {"name": "Mia Wong"}, "tier": "gold"},
        messages=(Message(role="user", name="Mia Wong", content="I am Mia Wong, account ACME-123456"),),
    )
    out = p.conversation(conv)
    assert out.messages[0].name == out.metadata["user"]["name"]
    name = out.metadata["user"]["name"]
    assert shape(name) == shape("Mia Wong")
    assert name != "Mia Wong"
    assert out.metadata["tier"] == "gold"
    assert out.messages[0].content is not None
    assert re.fullmatch(rf"I am {name}, account [A-Z]{{4}}-\d{{6}}", out.messages[0].content)
    assert "ACME-123456" not in out.messages[0].content


@given(st.text(alphabet="abcdefghij", min_size=2, max_size=6), st.text(alphabet="abcdefghij", min_size=1, max_size=4))
def test_a_field_value_is_replaced_as_a_whole_word_only(name: str, suffix: str) -> None:
    p = Pseudonymizer(de.Pseudonymize(kinds=[], fields=["user"], salt="s"))
    longer = f"{name}{suffix}"  # "Mia" in "Miami": another word, left alone
    conv = de.Conversation(id="c", metadata={"user": name},
                           messages=(Message(role="user", content=f"{name} flew to {longer}."),))  # fmt: skip
    out = p.conversation(conv)
    fake = out.metadata["user"]
    assert out.messages[0].content == f"{fake} flew to {longer}."


def test_the_toml_form_is_read() -> None:
    cfg = de.SourceConfig.model_validate(
        {"path": "x.jsonl", "pseudonymize": {"kinds": ["email", "card"], "patterns": ["ACME-\\d{6}"]}}
    )
    assert cfg.pseudonymize == de.Pseudonymize(kinds=("email", "card"), patterns=("ACME-\\d{6}",))
    with pytest.raises(ValueError, match="unknown kinds"):
        de.Pseudonymize(kinds=["passport"])


def test_load_config_reads_pseudonymize(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text(
        'out = "r"\n[source]\npath = "c.jsonl"\n'
        'pseudonymize = { kinds = ["email", "card"], patterns = ["ACME-\\\\d{6}"] }\n'
        '[baseline]\nmodel = "simulated:a"\n[candidate]\nmodel = "simulated:b"\n'
    )
    cfg = load_config(tmp_path / "run.toml")
    assert cfg.source is not None
    assert cfg.source.pseudonymize is not None
    assert cfg.source.pseudonymize.patterns == ("ACME-\\d{6}",)


# --- whole conversations and a whole run --------------------------------------------------------------------------

EMAIL, CARD, PHONE, CPF, IBAN = (
    "mia.wong@example.com",
    "4111 1111 1111 1111",
    "+1 415-555-0100",
    "529.982.247-25",
    "GB82WEST12345698765432",
)
SECRETS = [EMAIL, CARD, PHONE, CPF, IBAN, "4111111111111111", "52998224725", "Mia Wong"]


def personal(k: int) -> de.Conversation:
    tool = de.ToolSpec(name="find_customer", description="Find a customer.", parameters={"type": "object"})
    args = json.dumps({"email": EMAIL, "card": CARD, "note": f"cpf {CPF}"})
    return de.Conversation(
        id=f"conv-{k}",
        metadata={"queue": "billing", "user": {"name": "Mia Wong"}},
        tools=(tool,),
        messages=(
            Message(role="user", content=f"Hi, I am Mia Wong ({EMAIL}, {PHONE}); card {CARD}, IBAN {IBAN}."),
            Message(role="assistant", tool_calls=(ToolCall(id=f"c{k}", name="find_customer", arguments=args),)),
            Message(
                role="tool",
                tool_call_id=f"c{k}",
                name="find_customer",
                content=json.dumps({"email": EMAIL, "phone": PHONE, "cpf": CPF, "name": "Mia Wong"}),
            ),
            Message(role="assistant", content=f"Found you, Mia Wong: {EMAIL}."),
        ),
    )


def test_one_value_gets_one_fake_across_messages_tool_arguments_and_results() -> None:
    p = Pseudonymizer(de.Pseudonymize(fields=["user.name"], salt="s"))
    out = p.conversation(personal(0))
    text = json.dumps(out.model_dump(mode="json"))
    assert not [s for s in SECRETS if s in text]
    call = out.messages[1].tool_calls[0]
    assert call.arguments_valid
    fake_email = call.parsed_arguments["email"]
    result = json.loads(out.messages[2].content or "")
    assert result["email"] == fake_email
    assert fake_email in (out.messages[0].content or "")
    assert fake_email in (out.messages[3].content or "")
    assert result["cpf"] in call.parsed_arguments["note"]
    # Another conversation under the same salt maps the same values the same way (documented: one mapping per run).
    again = p.conversation(personal(1))
    assert again.messages[1].tool_calls[0].parsed_arguments == call.parsed_arguments
    # Another salt maps them differently.
    other = Pseudonymizer(de.Pseudonymize(fields=["user.name"], salt="t")).conversation(personal(0))
    assert other.messages[1].tool_calls[0].parsed_arguments["email"] != fake_email


def test_json_escapes_are_replaced_inside_strings_and_stay_valid_json() -> None:
    p = Pseudonymizer(de.Pseudonymize(fields=["name"], salt="s"))
    conv = de.Conversation(
        id="c",
        metadata={"name": 'Mia "M" Wong'},
        messages=(
            Message(
                role="assistant",
                tool_calls=(
                    ToolCall(id="c", name="f", arguments=json.dumps({"n": 'Mia "M" Wong', "card": 4111111111111111})),
                ),
            ),
        ),
    )
    call = p.conversation(conv).messages[0].tool_calls[0]
    assert call.arguments_valid
    assert "Mia" not in call.arguments
    assert "4111111111111111" not in call.arguments


def test_a_source_reads_the_same_fakes_each_time_without_a_salt() -> None:
    source = ConversationSource.from_conversations([personal(0)], pseudonymize=de.Pseudonymize())
    first, second = list(source), list(source)
    assert first == second
    assert EMAIL not in str(first)


def _files_with(folder: Path, needles: list[str]) -> dict[str, list[str]]:
    found = {}
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits = [n for n in needles if n.encode() in data]
            if path.suffix == ".parquet":
                import duckdb

                rows = duckdb.sql(f"SELECT * FROM read_parquet('{path}')").fetchall()
                hits += [n for n in needles if n in str(rows)]
            if hits:
                found[str(path.relative_to(folder))] = hits
    return found


def test_no_personal_value_reaches_the_run_folder_and_replays_still_match(tmp_path: Path) -> None:
    source = ConversationSource.from_conversations(
        [personal(k) for k in range(3)], pseudonymize=de.Pseudonymize(fields=["user.name"], keep_mapping=True)
    )
    result = de.run(
        conversations=source,
        out=tmp_path / "run",
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:b", provider_options={"reword_rate": 0.5}),
    )
    assert result.status == "completed"
    assert result.counts.errors == 0
    assert _files_with(tmp_path / "run", SECRETS) == {}
    # The replayed tool calls match the (pseudonymized) recording: the simulated model answers from it.
    con = result.connect()
    matched = con.execute("SELECT count(*) FROM replays WHERE matches_recorded AND turn_index = 0").fetchone()
    assert matched is not None
    assert matched[0] >= 3
    kept = json.loads((tmp_path / "run" / "pseudonyms.json").read_text())
    kinds = {row["kind"] for row in kept["pseudonyms"]}
    assert {"email", "card", "phone", "cpf", "iban", "field"} <= kinds
    p = source.pseudonymizer
    assert p is not None
    assert {row["hash"] for row in kept["pseudonyms"]} == set(p.mapping)
    assert p.hash(EMAIL) in {row["hash"] for row in kept["pseudonyms"]}
    # Overwritten by a run that keeps no mapping, the folder keeps none either.
    de.run(
        conversations=ConversationSource.from_conversations([personal(0)], pseudonymize=de.Pseudonymize()),
        out=tmp_path / "run",
        overwrite=True,
        baseline=de.Variant(model="simulated:a"),
        candidate=de.Variant(model="simulated:c"),
    )
    assert not (tmp_path / "run" / "pseudonyms.json").exists()


def test_a_configured_source_is_pseudonymized_and_its_salt_never_written(tmp_path: Path) -> None:
    export = tmp_path / "export.jsonl"
    records = [c.model_dump(mode="json") for c in (personal(k) for k in range(2))]
    export.write_text("".join(json.dumps({**r, "name": "Mia Wong"}) + "\n" for r in records))
    (tmp_path / "run.toml").write_text(
        'out = "run"\n[source]\npath = "export.jsonl"\nmetadata = ["name"]\n'
        'pseudonymize = { fields = ["name"], salt = "pepper-4242" }\n'
        '[baseline]\nmodel = "simulated:a"\n[candidate]\nmodel = "simulated:b"\n'
    )
    result = de.run(tmp_path / "run.toml")
    assert result.status == "completed"
    assert result.counts.errors == 0
    assert result.counts.pairs > 0
    assert _files_with(tmp_path / "run", [*SECRETS, "pepper-4242"]) == {}
    assert not (tmp_path / "run" / "pseudonyms.json").exists()


@settings(max_examples=40, deadline=None)
@given(raw=st.binary(min_size=1, max_size=200))
def test_media_bytes_are_left_whole_and_a_url_is_pseudonymised(raw: bytes) -> None:
    p = Pseudonymizer(de.Pseudonymize(salt="s"))
    image = de.MediaPart.from_bytes("image", raw, "image/png", filename="mia@shop.com.png")
    linked = de.MediaPart.from_url("file", "https://files.test/mia@shop.com/id.pdf", "application/pdf")
    conv = de.Conversation(id="c", messages=(Message(role="user", content="mia@shop.com", media=(image, linked)),))
    out = p.conversation(conv).messages[0]
    kept, moved = out.media
    assert (kept.data, kept.sha256) == (image.data, image.sha256)  # the bytes, and so their hash, unchanged
    assert kept.filename is not None
    assert "mia@shop.com" not in kept.filename
    assert moved.url is not None
    assert "mia@shop.com" not in moved.url
    assert moved.url.startswith("https://files.test/")
    assert moved == de.MediaPart.from_url("file", moved.url, "application/pdf")  # its hash names the new URL
