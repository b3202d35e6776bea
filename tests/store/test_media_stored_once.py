"""Media bytes are stored once per run folder, by hash, and come back whole when a run's conversations are read."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delta_eval.schema import MediaPart, Message, SampledConversation
from delta_eval.store.folder import RunFolder

payloads = st.lists(st.binary(min_size=1, max_size=64), min_size=1, max_size=3, unique=True)


def conversation(cid: str, parts: tuple[MediaPart, ...]) -> SampledConversation:
    messages = (
        Message(role="user", content="look", media=parts),
        Message(role="assistant", content="seen"),
    )
    return SampledConversation(conversation_id=cid, position=0, stratum="", weight=1.0, n_messages=2, n_turns=1,
                               n_pairs=1, messages=messages)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blobs=payloads, picks=st.lists(st.lists(st.integers(0, 2), max_size=3), min_size=1, max_size=4),
       batches=st.integers(1, 3))  # fmt: skip
def test_each_distinct_payload_is_stored_once_and_read_back_whole(
    blobs: list[bytes], picks: list[list[int]], batches: int
) -> None:
    parts = [MediaPart.from_bytes("image", b, "image/png") for b in blobs]
    url = MediaPart.from_url("image", "https://example.com/a.png", "image/png")
    convs = [conversation(f"c{k}", (*(parts[i % len(parts)] for i in pick), url)) for k, pick in enumerate(picks)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = RunFolder(Path(tmp))
        for k, conv in enumerate(convs):
            folder.add("conversations", [conv])
            if k % batches == 0:
                folder.commit()
        folder.commit()
        # A later session of the same run (a resume) knows what the folder already holds.
        again = RunFolder(Path(tmp))
        again.recover()
        again.add("conversations", [conversation("late", tuple(parts))])
        again.commit()
        stored = again.read("media").column("sha256").to_pylist()
        used = {p.sha256 for c in convs for m in c.messages for p in m.media if p.data is not None}
        assert sorted(stored) == sorted(used | {p.sha256 for p in parts})  # each once, none missing
        kept = again.read("conversations").column("messages").to_pylist()
        assert not any(p.data and p.data in text for p in parts for text in kept)  # references only
        assert again.read_conversations() == [*convs, conversation("late", tuple(parts))]


def test_the_history_a_recorded_call_sent_keeps_references_only(tmp_path: Path) -> None:
    from delta_eval.schema import CallContext

    image = MediaPart.from_bytes("image", b"\x89PNG-bytes-of-a-receipt", "image/png")
    look = Message(role="user", content="look", media=(image,))
    messages = (look, Message(role="assistant", content="seen"), Message(role="assistant", content="again"))
    # The second call sent a filtered history holding the same image (a trace's span-level context).
    calls = (CallContext(message_index=1), CallContext(message_index=2, input=(look,)))
    conv = SampledConversation(conversation_id="c", position=0, stratum="", weight=1.0, n_messages=3, n_turns=2,
                               n_pairs=2, messages=messages, calls=calls)  # fmt: skip
    folder = RunFolder(tmp_path)
    folder.add("conversations", [conv])
    folder.commit()
    assert folder.read("media").column("sha256").to_pylist() == [image.sha256]
    stored = folder.read("conversations").to_pylist()[0]
    assert image.data is not None
    assert image.data not in str(stored["calls"])
    assert image.data not in str(stored["messages"])
    assert folder.read_conversations() == [conv]
