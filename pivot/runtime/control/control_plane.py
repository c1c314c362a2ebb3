"""The control plane's endpoints: asynchronous and point-to-point.

The controller (rank 0) binds a zmq ROUTER on the job's own interface, every worker connects a
DEALER. The ROUTER's address travels through the c10d store of the default group, so nothing but
torchrun's rendezvous is needed. Messages are typed MessagePack (pivot/runtime/control/wire.py) in
HMAC-authenticated, numbered frames (pivot/runtime/control/frames.py), keyed by the job secret
(pivot/secret.py); a frame that fails any check is dropped, counted and logged once per peer, and
the job goes on. zmq keeps each pair's messages in order. docs/security.md has the trust model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from pivot.dist import ClusterSpec
from pivot.runtime.control import frames
from pivot.secret import ENV, KeyFile, from_env, require_for

if TYPE_CHECKING:
    import torch.distributed as dist
    import zmq

    from pivot.runtime.control.messages import Message

CONTROL_KEY = "pivot/control"
HOST_ENV = "PIVOT_CONTROL_HOST"
log = logging.getLogger(__name__)
_ADDR = re.compile(r"tcp://(\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:.]+\]):\d{1,5}")


def control_host(spec: ClusterSpec) -> str:
    """The address the controller listens on: loopback on a single host, else the local
    interface that routes to the rendezvous (MASTER_ADDR), never all interfaces."""
    if spec.nnodes <= 1:
        return "127.0.0.1"
    given = os.environ.get(HOST_ENV)
    if given:
        if given in ("*", "0.0.0.0", "::"):
            raise ValueError(f"{HOST_ENV}={given}: name one interface address, not all of them")
        return given
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        family, _, _, _, where = socket.getaddrinfo(
            master, int(os.environ.get("MASTER_PORT", "29500")), type=socket.SOCK_DGRAM
        )[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(where)  # sends nothing: asks the routing table which local address reaches it
            return s.getsockname()[0]
    except OSError as e:
        raise ValueError(
            f"cannot find the interface that reaches MASTER_ADDR={master} ({e}); set {HOST_ENV}"
        ) from None


@dataclass(frozen=True)
class ControlRecord:
    """What the controller publishes in the store: where it listens, the session nonce and, for
    a single-host run that made its own secret, the name of the key file."""

    addr: str
    nonce: str
    key_file: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {"addr": self.addr, "nonce": self.nonce, "key_file": self.key_file}
        ).encode()

    @classmethod
    def parse(cls, raw: bytes) -> ControlRecord:
        try:
            d = json.loads(raw)
            rec = cls(d["addr"], d["nonce"], d["key_file"])
            ok = (
                _ADDR.fullmatch(rec.addr)
                and re.fullmatch(r"[0-9a-f]{32}", rec.nonce)
                and isinstance(rec.key_file, str)
            )
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise ValueError(
                f"control plane: malformed record under {CONTROL_KEY!r} in the store: {raw[:200]!r}"
            )
        return rec


class RankGone(ConnectionError):
    """A rank's control connection is closed: its process exited or its host is unreachable."""


class Rejections:
    """Dropped frames: counted (`count/rejected_frames`), the first of each peer logged."""

    def __init__(self) -> None:
        self.count = 0
        self.peers: set[str] = set()

    def add(self, peer: str, reason: str) -> None:
        self.count += 1
        if peer not in self.peers:
            self.peers.add(peer)
            log.warning(
                "pivot: control plane: dropped a frame from %s: %s (further ones from this peer are only "
                "counted, count/rejected_frames)",
                peer,
                reason,
            )


def _peer(frame: zmq.Frame, route: bytes) -> str:
    try:
        return str(frame.get("Peer-Address"))
    except Exception:  # not every transport knows the address
        return f"connection {route.hex()}"


class ControllerEndpoint:
    def __init__(self, store: dist.Store, spec: ClusterSpec | None = None) -> None:
        import zmq

        spec = spec or ClusterSpec.from_env()
        secret = require_for(spec.nnodes)
        self._key_file: KeyFile | None = None
        if secret is None:  # one host: a fresh secret, handed to the ranks through a private file
            self._key_file = KeyFile.create()
            secret = self._key_file.secret
        nonce = os.urandom(16)
        key = frames.session_key(secret, nonce)
        self._sealer = frames.Sealer(key, frames.TO_WORKER, 0)
        self._opener = frames.Opener(key, frames.TO_CONTROLLER, None, spec.world_size)
        self._rejected, self._world = frames.Rejected, spec.world_size
        self.routes: dict[
            int, bytes
        ] = {}  # rank -> zmq routing id, learnt from its accepted frames
        self.peers: dict[int, str] = {}  # rank -> its address, to name it when it is gone
        self.gone: set[int] = set()
        self._unreachable = (zmq.ZMQError, zmq.EHOSTUNREACH)
        self.rejections = Rejections()
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(
            zmq.ROUTER_MANDATORY, 1
        )  # a message to a vanished rank raises, not vanishes
        self.sock.setsockopt(zmq.LINGER, 0)
        host = control_host(spec)
        if ":" in host:
            self.sock.setsockopt(zmq.IPV6, 1)
            host = f"[{host}]"
        port: int = self.sock.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        record = ControlRecord(
            self.address, nonce.hex(), self._key_file.name if self._key_file else ""
        )
        # torch's stub types Store.set's value as str; the binding takes bytes and stores them as is
        store.set(CONTROL_KEY, cast(str, record.encode()))

    @property
    def rejected(self) -> int:
        return self.rejections.count

    def send(self, rank: int, msg: object) -> None:
        route = self.routes.get(rank)
        if route is None:
            raise RuntimeError(f"control plane: rank {rank} has not said Hello")
        if rank in self.gone:  # said once; the job is ending (Stop to every rank on the way)
            return
        try:
            self.sock.send_multipart([route, self._sealer.seal(rank, msg)], copy=False)
        except self._unreachable[0] as e:
            if e.errno != self._unreachable[1]:  # ROUTER_MANDATORY: the peer's connection closed
                raise
            if self.gone:  # the job is already ending for the first one: a host's ranks go together
                self.gone.add(rank)
                return
            self.gone.add(rank)
            raise RankGone(
                f"rank {rank} at {self.peers.get(rank, 'an unknown address')} stopped answering: "
                "its control connection is closed (its process exited or its host is unreachable)"
            ) from None

    def recv(self, timeout_ms: int) -> tuple[int, Message] | None:
        """The next accepted message (source rank, message), waiting up to `timeout_ms` for one
        to arrive; rejected frames are dropped on the way."""
        if not self.sock.poll(timeout_ms):
            return None
        while True:
            parts = self.sock.recv_multipart(copy=False)
            route = parts[0].bytes
            if len(parts) != 2:
                self.rejections.add(
                    _peer(parts[0], route), f"{len(parts) - 1} frames in one message"
                )
            else:
                got = self._opener.open(parts[1].buffer)
                if not isinstance(got, self._rejected):
                    if got.src not in self.peers:
                        self.peers[got.src] = _peer(parts[1], route)
                    return self._accepted(route, got.src, got.msg)
                self.rejections.add(_peer(parts[1], route), got.reason)
            if not self.sock.poll(0):
                return None

    def _accepted(self, route: bytes, rank: int, msg: Message) -> tuple[int, Message]:
        self.routes[rank] = route
        if self._key_file is not None and len(self.routes) == self._world:
            self._key_file.remove()  # every rank has read it (each said Hello): no copy left to steal
            self._key_file = None
        return rank, msg

    def close(self) -> None:
        if self._key_file is not None:
            self._key_file.remove()
        self.sock.close()


class WorkerEndpoint:
    def __init__(self, store: dist.Store, rank: int) -> None:
        import zmq

        rec = ControlRecord.parse(store.get(CONTROL_KEY))
        secret = from_env()
        if (secret is None) == (not rec.key_file):
            mine, theirs = ("not set", "uses one") if secret is None else ("set", "does not")
            raise ValueError(
                f"{ENV} is {mine} on rank {rank} but the controller (rank 0) {theirs}: give every rank the same one"
            )
        key = frames.session_key(secret or KeyFile.read(rec.key_file), bytes.fromhex(rec.nonce))
        self._sealer = frames.Sealer(key, frames.TO_CONTROLLER, rank)
        self._opener = frames.Opener(
            key, frames.TO_WORKER, rank, 1
        )  # only rank 0 speaks to workers
        self._rejected, self._peer = frames.Rejected, rec.addr
        self.rejections = Rejections()
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 2000)
        self.sock.connect(rec.addr)

    @property
    def rejected(self) -> int:
        return self.rejections.count

    def send(self, msg: object) -> None:
        self.sock.send(self._sealer.seal(0, msg), copy=False)

    def recv_all(self, timeout_ms: int) -> list[object]:
        """Every accepted message waiting now; waits up to `timeout_ms` for the first frame."""
        out: list[object] = []
        if self.sock.poll(timeout_ms):
            while self.sock.poll(0):
                got = self._opener.open(self.sock.recv(copy=False).buffer)
                if isinstance(got, self._rejected):
                    self.rejections.add(f"controller {self._peer}", got.reason)
                else:
                    out.append(got.msg)
        return out

    def close(self) -> None:
        self.sock.close()
