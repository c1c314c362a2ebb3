"""The control plane's codec and frames (pivot/runtime/control/wire.py, frames.py): every message type
survives the trip with its field types; a frame with a bad or missing tag, a replayed,
reflected, misdirected, unknown or malformed one is rejected with a reason; a pickle is never
unpickled; and a Hypothesis fuzz of the decoder: any bytes give a typed message or a rejection,
never an exception."""

from __future__ import annotations

import hashlib
import hmac
import pickle
import struct
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.engine.sequence import EngineStats, Output, Request, SamplingParams
from pivot.rl.batch import TrainBatch
from pivot.runtime.control import frames, wire
from pivot.runtime.control import messages as m
from pivot.runtime.records.manifest import FileDigest

KEY = frames.session_key(b"0123456789abcdef0123", b"n" * 16)


def every_message() -> list[object]:
    req = Request(
        7, [1, 2, 3], SamplingParams(0.7, 0.9, 5, 12, 42, ("</s>",), True), [4, 5], [-0.5, -1.25]
    )
    out = Output(8, [1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], "length", 3)
    stats = EngineStats(2, 40, 100, 512, 999, 0.012, 3, 17, 5)
    batch = TrainBatch([[1, 2], [3]], [[4], []], [0.5, -0.5], [[-0.25], []], None)
    return [
        m.ShiftUp("rollout", 1, 3),
        m.ShiftDown("reward", 0),
        m.Generate(2, [req]),
        m.AbortSequences(1, [7, 9]),
        m.UpdateWeights(0, 4),
        m.TrainStep(5, batch),
        m.SaveCheckpoint(2, "/ck/step_2"),
        m.Stop("failed: x"),
        m.Hello(3, 1),
        m.Stats(1, "rollout", 0, stats, 12.5, {7: 2, 9: 0}),
        m.Finished(1, "reward", 2, [out]),
        m.Aborted(1, "rollout", 0, [req]),
        m.ShiftDone(2, "train", 0, True, 4, {"gps_read": 0.25}, 1.5, [req], 4096),
        m.WeightsUpdated(1, 0, 4, 0.5),
        m.Trained(2, 5, 6, {"loss": 0.1, "tokens": 12.0}),
        m.Saved(2, 2, [FileDigest("policy/model.safetensors", 10, "ab" * 32)]),
        m.Failed(3, "Traceback ..."),
        m.EngineFailed(1, "reward", 2, "EngineDeadError: the core exited", 5),
        m.ResizeTraining([6, 7], "/ck/step_3"),
    ]


def test_every_message_type_round_trips_with_its_types() -> None:
    msgs = every_message()
    assert sorted(type(x).__name__ for x in msgs) == sorted(t.__name__ for t in m.MESSAGE_TYPES)
    for msg in msgs:
        code, payload = wire.encode(msg)
        back = wire.decode(code, payload)
        assert back == msg and type(back) is type(msg)
    assert type(wire.decode(*wire.encode(msgs[2])).requests[0].params) is SamplingParams
    assert wire.decode_many(wire.encode_many(msgs)) == msgs


def test_types_and_checks_are_enforced() -> None:
    code = m.MESSAGE_TYPES.index(m.Generate)
    enc = msgspec.msgpack.encode
    with pytest.raises(wire.WireError, match="Expected `int`"):  # a token id that is a string
        wire.decode(code, enc({"slot": 0, "requests": [{"id": 1, "prompt_ids": ["x"]}]}))
    with pytest.raises(
        wire.WireError, match="temperature=-1"
    ):  # the record's own __post_init__ check
        wire.decode(
            code,
            enc(
                {
                    "slot": 0,
                    "requests": [{"id": 1, "prompt_ids": [1], "params": {"temperature": -1.0}}],
                }
            ),
        )
    with pytest.raises(wire.WireError, match="unknown message type"):
        wire.decode(len(m.MESSAGE_TYPES), b"\x80")
    with pytest.raises(TypeError, match="not a control message"):
        wire.encode({"a": 1})
    import torch

    with pytest.raises(TypeError):  # a tensor on a message is refused, never pickled
        wire.encode(m.Trained(0, 1, 1, {"loss": torch.tensor(1.0)}))


def _evil_pickle(target: Path) -> bytes:
    class Evil:
        def __reduce__(self) -> tuple:
            return open, (str(target), "w")  # unpickling creates the file

    return pickle.dumps(Evil())


def test_a_pickle_is_never_unpickled(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    pickle.loads(_evil_pickle(probe)).close()  # the oracle: this payload really is an attack
    assert probe.exists()
    target = tmp_path / "pwned"
    evil = _evil_pickle(target)
    opener = frames.Opener(KEY, frames.TO_CONTROLLER, None, 4)
    assert isinstance(opener.open(evil), frames.Rejected)
    for code in range(len(m.MESSAGE_TYPES)):  # even as a payload under a valid tag
        body = frames.HEADER.pack(frames.MAGIC, frames.TO_CONTROLLER, code, 1, 0, code) + evil
        assert isinstance(
            opener.open(body + hmac.digest(KEY, body, hashlib.sha256)), frames.Rejected
        )
    assert not target.exists()


def test_frames_rejections() -> None:
    sealer = frames.Sealer(KEY, frames.TO_CONTROLLER, 2)
    opener = frames.Opener(KEY, frames.TO_CONTROLLER, None, 4)
    first, second = sealer.seal(0, m.Hello(2, 0)), sealer.seal(0, m.Stop())
    got = opener.open(first)
    assert isinstance(got, frames.Opened) and (got.src, got.seq, got.msg) == (2, 0, m.Hello(2, 0))

    def reason(frame: bytes, o: frames.Opener = opener) -> str:
        out = o.open(frame)
        assert isinstance(out, frames.Rejected), out
        return out.reason

    assert "replayed" in reason(first)
    assert "bad authentication tag" in reason(second[:-32] + bytes(32))  # wrong tag
    assert "short frame" in reason(second[:-32])  # missing tag
    assert "bad authentication tag" in reason(
        sealer.seal(0, m.Failed(2, "x" * 64))[:-32]
    )  # the payload's tail taken for a tag
    other = frames.Sealer(
        frames.session_key(b"another job's secret", b"n" * 16), frames.TO_CONTROLLER, 2
    )
    assert "bad authentication tag" in reason(other.seal(0, m.Stop()))
    flipped = bytearray(second)
    flipped[frames.HEADER.size] ^= 1
    assert "bad authentication tag" in reason(bytes(flipped))
    assert "short frame" in reason(b"PVC1")
    assert "not a Pivot" in reason(b"x" * 100)
    assert "reflected" in reason(frames.Sealer(KEY, frames.TO_WORKER, 2).seal(0, m.Stop()))
    assert "outside the job" in reason(
        frames.Sealer(KEY, frames.TO_CONTROLLER, 9).seal(0, m.Stop())
    )
    to_rank1 = frames.Opener(KEY, frames.TO_WORKER, 1, 1)
    assert "for rank 3" in reason(
        frames.Sealer(KEY, frames.TO_WORKER, 0).seal(3, m.Stop()), to_rank1
    )

    def forged(code: int, payload: bytes, seq: int) -> bytes:  # a valid tag over a bad body
        body = frames.HEADER.pack(frames.MAGIC, frames.TO_CONTROLLER, code, 1, 0, seq) + payload
        return body + hmac.digest(KEY, body, hashlib.sha256)

    assert "unknown message type 200" in reason(forged(200, b"\x80", 5))
    assert "malformed Hello" in reason(forged(m.MESSAGE_TYPES.index(m.Hello), b"\xc1", 6))
    assert isinstance(
        opener.open(second), frames.Opened
    )  # the rejections cost the genuine frames nothing


def _sealed(code: int, payload: bytes, seq: int) -> bytes:
    body = frames.HEADER.pack(frames.MAGIC, frames.TO_CONTROLLER, code, 1, 0, seq) + payload
    return body + hmac.digest(KEY, body, hashlib.sha256)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=20,
)
field_names = st.sampled_from(
    [
        "rank",
        "role",
        "slot",
        "requests",
        "id",
        "prompt_ids",
        "params",
        "stats",
        "batch",
        "outputs",
        "partials",
        "files",
        "metrics",
        "progress",
        "temperature",
        "prompt_ids",
    ]
)
message_like = st.dictionaries(field_names, msgpack_values, max_size=8)


@settings(max_examples=300, deadline=None)
@given(frame=st.binary(max_size=300))
def test_fuzz_random_bytes_are_rejected_cleanly(frame: bytes) -> None:
    got = frames.Opener(KEY, frames.TO_CONTROLLER, None, 4).open(frame)
    assert isinstance(got, frames.Rejected) and got.reason


@settings(max_examples=400, deadline=None)
@given(
    code=st.integers(0, 255),
    payload=st.one_of(st.binary(max_size=200), message_like.map(msgspec.msgpack.encode)),
)
@pytest.mark.slow
def test_fuzz_authenticated_payloads_decode_to_a_typed_message_or_a_rejection(
    code: int, payload: bytes
) -> None:
    # the strongest position: the fuzzer holds the key, so every frame passes the tag check
    got = frames.Opener(KEY, frames.TO_CONTROLLER, None, 4).open(_sealed(code, payload, 0))
    if isinstance(got, frames.Opened):
        assert type(got.msg) is m.MESSAGE_TYPES[code]
        assert wire.decode(*wire.encode(got.msg)) == got.msg  # a real message, re-encodable
    else:
        assert isinstance(got, frames.Rejected) and got.reason


ENCODED = [wire.encode(x) for x in every_message()]


@settings(max_examples=400, deadline=None)
@given(
    which=st.integers(0, len(ENCODED) - 1),
    at=st.integers(0, 10**6),
    byte=st.integers(0, 255),
    cut=st.booleans(),
)
def test_fuzz_mutated_real_messages(which: int, at: int, byte: int, cut: bool) -> None:
    # near misses of genuine payloads reach deep into the typed decoder (and often still decode)
    code, payload = ENCODED[which]
    at %= len(payload)
    mutated = payload[:at] if cut else payload[:at] + bytes([byte]) + payload[at + 1 :]
    got = frames.Opener(KEY, frames.TO_CONTROLLER, None, 4).open(_sealed(code, mutated, 0))
    if isinstance(got, frames.Opened):
        assert type(got.msg) is m.MESSAGE_TYPES[code]
    else:
        assert got.reason


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=200)
    | st.lists(st.tuples(st.integers(0, 40), st.binary(max_size=30)), max_size=4).map(
        msgspec.msgpack.encode
    )
)
def test_fuzz_message_batches(data: bytes) -> None:
    try:
        msgs = wire.decode_many(data)
    except wire.WireError:
        return
    assert all(type(x) in m.MESSAGE_TYPES for x in msgs)


def test_header_layout_is_the_documented_one() -> None:
    frame = frames.Sealer(KEY, frames.TO_WORKER, 0).seal(3, m.Stop())
    assert struct.unpack_from("<4sBBIIQ", frame) == (
        b"PVC1",
        1,
        m.MESSAGE_TYPES.index(m.Stop),
        0,
        3,
        0,
    )
    assert (
        frame[-32:] == hmac.new(KEY, frame[:-32], "sha256").digest()
    )  # the stdlib's HMAC, spelled out


@settings(max_examples=100, deadline=None)
@given(key=st.binary(min_size=1, max_size=100), data=st.binary(max_size=300))
def test_precomputed_hmac_is_the_stdlib_hmac(key: bytes, data: bytes) -> None:
    assert frames.Hmac(key).tag(data) == hmac.new(key, data, hashlib.sha256).digest()
