"""The control plane's endpoints over real zmq sockets in one process (pivot/runtime/control/control_plane.py): the
controller listens on loopback only for a single host, a rogue local client's pickle, random
bytes, multi-part message, wrong or missing tag and replayed frame are dropped, counted and
logged once while genuine traffic goes on; the per-job secret's sources and their one-line
errors."""

from __future__ import annotations

import logging
import os
import pickle
import socket
import stat
import time
from pathlib import Path

import pytest
import torch.distributed as dist
import zmq

from pivot.dist import ClusterSpec
from pivot.runtime.control import frames
from pivot.runtime.control import messages as m
from pivot.runtime.control.control_plane import (
    CONTROL_KEY,
    ControllerEndpoint,
    ControlRecord,
    RankGone,
    WorkerEndpoint,
    control_host,
)
from pivot.secret import ENV, KeyFile, private_dir, require_for

SECRET = "test-secret-0123456789abcdef"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("PIVOT_CONTROL_HOST", raising=False)
    return monkeypatch


def own_addresses() -> set[str]:
    """This host's non-loopback IPv4 addresses: its name's, and the source of its default route
    (a UDP connect sends nothing)."""
    found = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.254.254.254", 9))
            found.add(s.getsockname()[0])
    except OSError:
        pass
    return {ip for ip in found if not ip.startswith("127.")}


def start(
    world: int, spec: ClusterSpec | None = None
) -> tuple[dist.Store, ControllerEndpoint, list[WorkerEndpoint]]:
    store = dist.HashStore()
    ctrl = ControllerEndpoint(store, spec or ClusterSpec(world, 0, world))
    workers = [WorkerEndpoint(store, r) for r in range(world)]
    for w in workers:
        w.send(m.Hello(w._sealer.src, 0))
    got = {recv(ctrl)[0] for _ in workers}
    assert got == set(range(world))
    return store, ctrl, workers


def recv(ctrl: ControllerEndpoint, timeout_ms: int = 3000) -> tuple[int, object]:
    got = ctrl.recv(timeout_ms)
    while got is None and timeout_ms > 0:  # rejected frames return None; wait for a genuine one
        got, timeout_ms = ctrl.recv(200), timeout_ms - 200
    assert got is not None
    return got


def drain_worker(w: WorkerEndpoint, want: int) -> list[object]:
    out: list[object] = []
    for _ in range(50):
        out += w.recv_all(100)
        if len(out) >= want:
            break
    return out


def test_single_host_listens_on_loopback_only(env: pytest.MonkeyPatch) -> None:
    _, ctrl, workers = start(2)
    assert ctrl.address.startswith("tcp://127.0.0.1:")
    port = int(ctrl.address.rsplit(":", 1)[1])
    for ip in own_addresses():  # every non-loopback address of this host refuses the port
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect((ip, port))
    ctrl.send(1, m.Stop("x"))
    assert drain_worker(workers[1], 1) == [m.Stop("x")]


def test_multi_node_interface_is_the_one_that_reaches_the_rendezvous(
    env: pytest.MonkeyPatch,
) -> None:
    spec = ClusterSpec(16, 0, 8)
    env.setenv("MASTER_ADDR", "127.0.0.1")
    assert control_host(spec) == "127.0.0.1"
    ips = own_addresses()
    if ips:  # a rendezvous on this host's own address: the controller listens there, and only there
        ip = sorted(ips)[0]
        env.setenv("MASTER_ADDR", ip)
        env.setenv(ENV, SECRET)
        store = dist.HashStore()
        ctrl = ControllerEndpoint(store, spec)
        assert ctrl.address.startswith(f"tcp://{ip}:")
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect(("127.0.0.1", int(ctrl.address.rsplit(":", 1)[1])))
        worker = WorkerEndpoint(store, 9)
        worker.send(m.Hello(9, 1))
        assert recv(ctrl) == (9, m.Hello(9, 1))
        env.delenv(ENV)
    env.setenv("PIVOT_CONTROL_HOST", "0.0.0.0")
    with pytest.raises(ValueError, match="not all of them"):
        control_host(spec)
    env.delenv("PIVOT_CONTROL_HOST")
    env.setenv("MASTER_ADDR", "no-such-host.invalid")
    with pytest.raises(ValueError, match="MASTER_ADDR=no-such-host.invalid"):
        control_host(spec)


def test_rogue_client_is_dropped_counted_and_logged_once(
    env: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env.setenv(ENV, SECRET)
    _, ctrl, workers = start(2)
    captured: list[bytes] = []
    real_send = workers[1].sock.send
    workers[1].sock.send = lambda data, copy=True: (
        captured.append(bytes(data)),
        real_send(data, copy=copy),
    )[1]  # type: ignore[method-assign]
    workers[1].send(m.Hello(1, 0))  # a genuine frame, recorded
    assert recv(ctrl) == (1, m.Hello(1, 0))

    target = tmp_path / "pwned"

    class Evil:
        def __reduce__(self) -> tuple:
            return open, (str(target), "w")

    genuine = frames.Sealer(frames.session_key(SECRET.encode(), b"x" * 16), frames.TO_CONTROLLER, 1)
    forged = genuine.seal(0, m.Finished(1, "rollout", 0, []))
    rogue = zmq.Context.instance().socket(zmq.DEALER)
    rogue.setsockopt(zmq.LINGER, 0)
    rogue.setsockopt(zmq.IDENTITY, b"1")  # claiming rank 1's old zmq identity buys nothing
    rogue.connect(ctrl.address)
    attacks = [
        [pickle.dumps(Evil())],
        [os.urandom(64)],
        [b"a", b"b"],
        [forged],
        [captured[0][:-32] + bytes(32)],
        [captured[0][:-32]],
        [captured[0]],
    ]
    caplog.set_level(logging.WARNING, logger="pivot.runtime.control.control_plane")
    for parts in attacks:
        rogue.send_multipart(parts)
    for _ in range(
        50
    ):  # the rogue's connection is not ordered with the workers': wait for its frames
        assert ctrl.recv(100) is None
        if ctrl.rejected == len(attacks):
            break
    workers[0].send(m.Failed(0, "after the attack"))
    assert recv(ctrl) == (0, m.Failed(0, "after the attack"))
    assert ctrl.rejected == len(attacks)
    assert not target.exists()
    lines = [r.getMessage() for r in caplog.records if "dropped a frame" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1" in lines[0], lines  # one peer, one line
    ctrl.send(1, m.Stop())  # rank 1 is still reached at its own connection, not the rogue's
    assert drain_worker(workers[1], 1) == [m.Stop()]
    assert rogue.poll(200) == 0
    rogue.close()


@pytest.mark.slow
def test_worker_drops_frames_from_an_impostor_controller(env: pytest.MonkeyPatch) -> None:
    # someone who can write the store points the worker at their own ROUTER
    env.setenv(ENV, SECRET)
    impostor = zmq.Context.instance().socket(zmq.ROUTER)
    impostor.setsockopt(zmq.LINGER, 0)
    port = impostor.bind_to_random_port("tcp://127.0.0.1")
    store = dist.HashStore()
    store.set(CONTROL_KEY, ControlRecord(f"tcp://127.0.0.1:{port}", "ab" * 16).encode())
    worker = WorkerEndpoint(store, 1)
    worker.send(m.Hello(1, 0))
    assert impostor.poll(3000)
    route, _ = impostor.recv_multipart()
    wrong_key = frames.Sealer(
        frames.session_key(b"guessed-secret-000000", bytes.fromhex("ab" * 16)), frames.TO_WORKER, 0
    )
    for frame in (pickle.dumps(m.Stop()), wrong_key.seal(1, m.Stop()), b"\x00" * 80):
        impostor.send_multipart([route, frame])
    assert drain_worker(worker, 3) == [] and worker.rejected == 3
    impostor.close()


def test_single_host_makes_its_own_secret_file_and_removes_it(env: pytest.MonkeyPatch) -> None:
    store = dist.HashStore()
    ctrl = ControllerEndpoint(store, ClusterSpec(2, 0, 2))
    name = ControlRecord.parse(store.get(CONTROL_KEY)).key_file
    path = private_dir() / name
    assert (
        stat.S_IMODE(path.stat().st_mode) == 0o600
        and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    )
    workers = [WorkerEndpoint(store, r) for r in range(2)]
    for r, w in enumerate(workers):
        w.send(m.Hello(r, 0))
    recv(ctrl), recv(ctrl)
    assert not path.exists()  # every rank said Hello: the file is gone
    ctrl.send(0, m.Stop())
    assert drain_worker(workers[0], 1) == [m.Stop()]


def test_secret_errors_are_one_line(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multi-node run needs a per-job secret") as e:
        require_for(2)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="multi-node"):
        ControllerEndpoint(dist.HashStore(), ClusterSpec(16, 0, 8))
    assert require_for(1) is None
    env.setenv(ENV, "short")
    with pytest.raises(ValueError, match="at least 16"):
        require_for(1)
    env.setenv(ENV, SECRET)
    assert require_for(2) == SECRET.encode()
    store = dist.HashStore()
    ControllerEndpoint(store, ClusterSpec(2, 0, 2))  # with the secret ...
    env.delenv(ENV)
    with pytest.raises(
        ValueError, match="not set on rank 1 but the controller"
    ):  # ... that rank 1 lacks
        WorkerEndpoint(store, 1)
    bad = private_dir()
    bad.chmod(0o755)
    with pytest.raises(ValueError, match="not a private folder"):
        KeyFile.create()
    bad.chmod(0o700)
    with pytest.raises(ValueError, match="bad key file name"):
        KeyFile.read("../../etc/passwd")
    store.set(CONTROL_KEY, b"{not json")
    with pytest.raises(ValueError, match="malformed record"):
        WorkerEndpoint(store, 1)


def test_a_rank_whose_connection_closed_is_named_once(env: pytest.MonkeyPatch) -> None:
    """A rank whose process exited: the controller's next message to it fails in one error
    naming the rank and its address; later sends to it, or to other vanished ranks while the job
    ends, are dropped (the Stop broadcast must reach the living)."""
    _, ctrl, workers = start(3)
    workers[1].close()
    workers[2].close()
    with pytest.raises(RankGone) as gone:
        for _ in range(100):  # zmq learns of the closed connection asynchronously
            ctrl.send(1, m.Stop("x"))
            time.sleep(0.05)
    assert str(gone.value).startswith(
        "rank 1 at 127.0.0.1 stopped answering: its control connection is closed"
    )
    time.sleep(0.3)
    for rank in range(3):
        ctrl.send(rank, m.Stop("done"))  # rank 2 is gone too: dropped, not raised
    assert drain_worker(workers[0], 1) == [m.Stop("done")]
