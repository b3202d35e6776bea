"""Whole runs over conversations with an image: on each provider's wire (real SDK, fake server) the image reaches the
model in the provider's shape and the run ends with no error; the judges never see its bytes; and the run folder
keeps the bytes once, however many conversations, replays and pairs share the image."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import delta_eval as de
from delta_eval.demo import WIRES, behaviours, demo_config, demo_conversations, demo_models
from delta_eval.schema import Conversation, MediaPart
from delta_eval.store.folder import RunFolder
from delta_eval.testing import FakeOpenAIServer

#: 3 KB of image bytes whose base64 has no ``+`` or ``/`` (so Google's URL-safe alphabet spells it the same).
RAW = b"0123456789" * 300
IMAGE = MediaPart.from_bytes("image", RAW, "image/png")
B64 = base64.b64encode(RAW).decode()


def with_image(n: int) -> list[Conversation]:
    """The first ``n`` demo conversations, the same image on each one's first user message."""
    conversations, _ = demo_conversations().load()
    out = []
    for conv in conversations[:n]:
        messages = list(conv.messages)
        first = next(i for i, m in enumerate(messages) if m.role == "user")
        messages[first] = messages[first].model_copy(update={"media": (IMAGE,)})
        out.append(conv.model_copy(update={"messages": tuple(messages)}))
    return out


def occurrences(folder: Path, text: str) -> tuple[int, int]:
    """How often ``text`` is in the folder's files as written, and in the values of its Parquet files decoded."""
    raw = decoded = 0
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        raw += path.read_bytes().count(text.encode())
        if path.suffix == ".parquet":
            decoded += json.dumps(pq.read_table(path).to_pylist(), default=str).count(text)
    return raw, decoded


def test_the_setup_spells_the_image_alike_in_both_base64_alphabets() -> None:
    assert IMAGE.data == B64
    assert "+" not in B64
    assert "/" not in B64


@pytest.mark.parametrize("wire", list(WIRES))
def test_a_run_over_image_conversations_on_each_wire_sends_them_and_ends_without_error(
    wire: str, tmp_path: Path
) -> None:
    conversations = with_image(3)
    prefix, server_class = WIRES[wire]
    with server_class(recordings=conversations, behaviour=behaviours(7, 0.0, "changed")) as server:
        url = server.base_url if isinstance(server, FakeOpenAIServer) else server.url
        models = demo_models(prefix, {"base_url": url, "api_key": "k"}, latency_ms=0.0)
        config = demo_config(tmp_path / "run", n=3, models=models).model_copy(update={"max_turns_per_conversation": 1})
        result = de.run(config, conversations=conversations)
        bodies = [json.dumps(r.json()) for r in server.requests]
    assert result.status == "completed"
    assert result.counts.pairs >= 3
    assert result.counts.errors == 0
    replays = [b for b in bodies if B64 in b]  # the bytes, in the provider's shape (the fake checked it)
    assert replays
    assert all(IMAGE.placeholder not in b for b in replays)
    judged = [b for b in bodies if "<output_a>" in b]  # the judges' calls: the placeholder, never the bytes
    assert judged
    assert all(B64 not in b for b in judged)
    assert any(IMAGE.placeholder in b for b in judged)


def test_a_run_over_conversations_sharing_one_image_stores_its_bytes_once(tmp_path: Path) -> None:
    conversations = with_image(6)
    out = tmp_path / "run"
    config = demo_config(out, n=6, latency_ms=0.0)
    result = de.run(config, conversations=conversations)
    assert result.counts.pairs > len(conversations)  # several pairs per conversation, all sharing the image
    assert result.counts.errors == 0
    raw, decoded = occurrences(out, B64)
    assert raw <= 1
    assert decoded == 1  # the one row of the media dataset
    assert result.table("media").column("sha256").to_pylist() == [IMAGE.sha256]
    # The conversations read back whole: the reference in their messages finds the bytes again.
    back = RunFolder(out).read_conversations()
    assert sorted(c.conversation_id for c in back) == sorted(c.id for c in conversations)
    assert all(c.messages == next(o for o in conversations if o.id == c.conversation_id).messages for c in back)
    # A resumed run (nothing left to do) writes no second copy.
    again = de.run(config, conversations=conversations)
    assert again.status == "completed"
    assert occurrences(out, B64) == (raw, decoded)
