"""A rogue client on localhost attacks a running 4-rank job's control port: (a) a pickle whose
unpickling would create a file, (b) random bytes, (c) a
well-formed message with a wrong tag and with no tag, (d) a replay of a frame rank 1 really
sent. The file is never created, the job finishes every step with the exactly-once audit
passing, `count/rejected_frames` shows each rejection and the log names the peer once.

The replayed frame is rebuilt bit for bit from what an eavesdropper would have: the session
nonce read from the c10d store (which the trust model leaves as torchrun provides it) and, to
stand in for the captured bytes, the job secret the test itself handed the job."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
import torch.distributed as dist
import zmq

from pivot.runtime.control import messages as m
from pivot.runtime.records.audit import exactly_once
from tests.conftest import ROOT
from tests.runtime.models import random_models
from tests.runtime.test_runtime import SMALL, B, G

pytestmark = pytest.mark.slow
SECRET = "attack-test-secret-0123456789abcdef"
STEPS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hello_frame(nonce: bytes, rank: int, seq: int) -> bytes:
    """rank's Hello as the documented format spells it (docs/security.md), independent of frames.py."""
    key = hmac.new(SECRET.encode(), b"pivot-control-v1|" + nonce, hashlib.sha256).digest()
    body = struct.pack("<4sBBIIQ", b"PVC1", 0, m.MESSAGE_TYPES.index(m.Hello), rank, 0, seq)
    body += msgspec.msgpack.encode({"rank": rank, "host": 0})
    return body + hmac.new(key, body, hashlib.sha256).digest()


def test_hand_built_hello_is_what_a_worker_sends() -> None:
    from pivot.runtime.control import frames

    nonce = bytes(range(16))
    sealer = frames.Sealer(frames.session_key(SECRET.encode(), nonce), frames.TO_CONTROLLER, 1)
    assert sealer.seal(0, m.Hello(1, 0)) == hello_frame(nonce, 1, 0)


def wait_for(
    cond, what: str, proc: subprocess.Popen, lines: list[str], timeout: float = 180
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"job ended while waiting for {what}:\n" + "".join(lines[-60:])
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n" + "".join(
            lines[-60:]
        )
        time.sleep(0.1)


def test_rogue_client_cannot_run_code_or_forge_and_the_job_completes(tmp_path: Path) -> None:
    models = random_models(tmp_path / "models")
    run_dir, target, port = tmp_path / "run", tmp_path / "pwned", free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "4",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--max-restarts",
        "0",
        str(ROOT / "pivot" / "main.py"),
        "--model.policy",
        str(models[0]),
        "--model.genrm",
        str(models[1]),
        "--log.dir",
        str(run_dir),
        *SMALL,
        "--train.steps",
        str(STEPS),
    ]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PIVOT_JOB_SECRET": SECRET,
    }
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True
    )
    reader.start()
    try:
        wait_for(
            lambda: any("control plane listening on" in line for line in lines),
            "the control address",
            proc,
            lines,
        )
        addr = next(line for line in lines if "control plane listening on" in line).split()[5]
        assert addr.startswith("tcp://127.0.0.1:"), addr

        class Evil:
            def __reduce__(self) -> tuple:
                return open, (str(target), "w")

        store = dist.TCPStore(
            "127.0.0.1",
            port,
            is_master=False,
            wait_for_workers=False,
            timeout=timedelta(seconds=30),
        )
        key = next(k for k in store.list_keys() if k.endswith("pivot/control"))
        nonce = bytes.fromhex(json.loads(store.get(key))["nonce"])
        wrong = hmac.new(b"a guessed secret", b"pivot-control-v1|" + nonce, hashlib.sha256).digest()
        body = struct.pack("<4sBBIIQ", b"PVC1", 0, m.MESSAGE_TYPES.index(m.Finished), 1, 0, 10**6)
        body += msgspec.msgpack.encode({"rank": 1, "role": "rollout", "slot": 0, "outputs": []})
        rogue = zmq.Context.instance().socket(zmq.DEALER)
        rogue.setsockopt(zmq.LINGER, 1000)
        rogue.connect(addr)
        attacks = [
            pickle.dumps(Evil()),
            os.urandom(200),
            body + hmac.new(wrong, body, hashlib.sha256).digest(),
            body,
        ]
        for frame in attacks:
            rogue.send(frame)
        timeline = run_dir / "timeline.jsonl"
        wait_for(
            lambda: timeline.is_file() and '"sample"' in timeline.read_text(),
            "the first monitor sample (every rank said Hello)",
            proc,
            lines,
        )
        rogue.send(hello_frame(nonce, 1, 0))  # (d) rank 1's first frame, replayed
        attacks.append(b"replay")
        proc.wait(timeout=300)
        rogue.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        reader.join(timeout=10)
    out = "".join(lines)
    assert proc.returncode == 0, out[-4000:]
    assert not target.exists()
    assert exactly_once(run_dir, STEPS, B, G).violations == []
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS and rows[-1]["count/rejected_frames"] == len(attacks), (
        rows[-1],
        out[-3000:],
    )
    logged = [line for line in out.splitlines() if "dropped a frame from" in line]
    assert len(logged) == 1 and "127.0.0.1" in logged[0], logged
