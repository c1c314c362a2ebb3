"""Authenticated control frames: HMAC-SHA256 under the job's session key, sequence numbers
against replay.

    frame = header (22 bytes) | payload (wire.encode) | tag (32 bytes)
    header = magic "PVC1", direction, type code, source rank, destination rank, sequence number
    tag = HMAC-SHA256(session key, header | payload)

The session key is derived from the job secret and a random nonce the controller draws at
start-up, so frames of an earlier attempt or job with the same secret (a Slurm requeue keeps
the job id) never verify in this one. The tag covers the direction and the destination, so a
frame cannot be reflected back to its sender or delivered to another rank, and the sequence
number, so a recorded frame replayed later is stale: each sender numbers its frames 0, 1, 2...
and a receiver accepts from each source only numbers above the last it accepted.

`Opener.open` never raises: every frame is an `Opened` message or a `Rejected` with a reason.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

from pivot.runtime.control import wire
from pivot.runtime.control.messages import Message

MAGIC = b"PVC1"
HEADER = struct.Struct("<4sBBIIQ")
TAG_BYTES = 32
TO_CONTROLLER, TO_WORKER = 0, 1


def session_key(secret: bytes, nonce: bytes) -> bytes:
    return hmac.digest(secret, b"pivot-control-v1|" + nonce, hashlib.sha256)


class Hmac:
    """HMAC-SHA256 under one key (RFC 2104) with the padded-key hash states computed once:
    OpenSSL 3's one-shot `hmac.digest` sets up a keyed context on every call (~9 us per small
    frame here vs ~2 us; tools/bench_control.py). The tests check it against `hmac.new`."""

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:  # the SHA-256 block; session keys are 32 bytes
            key = hashlib.sha256(key).digest()
        key = key.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def tag(self, data: bytes | memoryview) -> bytes:
        inner = self._inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


@dataclass(frozen=True)
class Opened:
    src: int
    seq: int
    msg: Message


@dataclass(frozen=True)
class Rejected:
    reason: str


class Sealer:
    """One sender's frames: numbered in the order they are sealed."""

    def __init__(self, key: bytes, direction: int, src: int) -> None:
        self.mac, self.direction, self.src = Hmac(key), direction, src
        self.seq = 0

    def seal(self, dst: int, msg: object) -> bytes:
        code, payload = wire.encode(msg)
        body = HEADER.pack(MAGIC, self.direction, code, self.src, dst, self.seq) + payload
        self.seq += 1
        return body + self.mac.tag(body)


class Opener:
    """One receiver: `dst` is its own rank (None: accept any, the controller's), `world` bounds
    the source ranks it accepts."""

    def __init__(self, key: bytes, direction: int, dst: int | None, world: int) -> None:
        self.mac, self.direction, self.dst, self.world = Hmac(key), direction, dst, world
        self.last: dict[int, int] = {}  # source rank -> last sequence number accepted

    def open(self, frame: bytes | memoryview) -> Opened | Rejected:
        try:
            return self._open(memoryview(frame).cast("B"))
        except Exception as e:  # odd buffer types; nothing a peer sends may stop the receiver
            return Rejected(f"unreadable frame: {type(e).__name__}")

    def _open(self, frame: memoryview) -> Opened | Rejected:
        if len(frame) < HEADER.size + TAG_BYTES:
            return Rejected(f"short frame ({len(frame)} bytes)")
        if frame[:4] != MAGIC:
            return Rejected("not a Pivot control frame")
        body, tag = frame[:-TAG_BYTES], frame[-TAG_BYTES:]
        if not hmac.compare_digest(self.mac.tag(body), tag):
            return Rejected("bad authentication tag")
        _, direction, code, src, dst, seq = HEADER.unpack_from(frame)
        if direction != self.direction:
            return Rejected("frame sent the other way (reflected)")
        if self.dst is not None and dst != self.dst:
            return Rejected(f"frame for rank {dst}")
        if src >= self.world:
            return Rejected(f"source rank {src} outside the job")
        if seq <= self.last.get(src, -1):
            return Rejected(f"replayed or stale frame (sequence {seq} from rank {src})")
        try:
            msg = wire.decode(code, body[HEADER.size :])
        except wire.WireError as e:
            return Rejected(str(e))
        self.last[src] = seq
        return Opened(src, seq, msg)
