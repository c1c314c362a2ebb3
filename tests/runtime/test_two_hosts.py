"""The main job on two hosts for real: two network namespaces joined by a veth pair, each with
its own hostname, /etc/hosts, /dev/shm, IPC and PIDs (tests/runtime/netns.py), one torchrun
agent per node with 2 ranks, c10d rendezvous, PIVOT_JOB_SECRET on both.

- A plain run shifts devices of both hosts, accounts every sample exactly once, and reads every
  shift-up's bytes from the reader's own host's GPS copy (each host holds the full model).
- A node-2 rank that stops answering (SIGSTOP) under static rendezvous (`--node-rank`, where no
  torchrun agent would tell host 1): host 1's heartbeats name it and end the job in seconds.
- A checkpoint folder that node 2 does not share stops the job at start, in one line.
- A SIGKILL of a node-2 rank after the first checkpoint (a worker, or node 2's local rank 0, which
  serves that host's GPS copy): torchrun restarts both nodes, the new attempt (one id on both,
  pivot/runtime/job/attempt.py) resumes from the newest complete checkpoint and finishes, exactly
  once, within BOUND_S of the kill (without the agreed id host 1 waited on the dead attempt's
  keys for the store's 10 minutes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pivot.runtime.records.audit import exactly_once, resumes
from tests.conftest import ROOT
from tests.runtime.models import random_models
from tests.runtime.netns import SUBNET, TwoHosts, namespaces_problem
from tests.runtime.test_runtime import SMALL, B, G, rows

pytestmark = pytest.mark.slow

BOUND_S = 300  # kill -> finished; a hang guard, generous for a 2-core machine shared with others


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return random_models(tmp_path_factory.mktemp("models"))


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[TwoHosts]:
    problem = namespaces_problem()
    if problem is not None:
        pytest.skip(f"two namespaced hosts cannot be made here: {problem}")
    with TwoHosts(tmp_path) as two:
        yield two


def events(run_dir: Path) -> list[dict]:
    """The timeline so far ([] before the controller made it)."""
    return rows(run_dir, "timeline.jsonl") if (run_dir / "timeline.jsonl").is_file() else []


def c10d(node: int) -> list[str]:
    return ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{SUBNET}.1:29400", "--rdzv-id", "two"]


def static(node: int) -> list[str]:
    return ["--node-rank", str(node), "--master-addr", "pivotnode1", "--master-port", "29400"]


def launch(
    hosts: TwoHosts,
    models: tuple[Path, Path],
    run_dir: Path,
    restarts: int,
    *flags: str,
    rdzv: Callable[[int], list[str]] = c10d,
    node2_private: tuple[Path, ...] = (),
) -> list[subprocess.Popen]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PIVOT_JOB_SECRET": "two-hosts-test-" + run_dir.name,
    }
    procs = []
    for i in range(2):
        argv = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2", "--nproc-per-node", "2",
            *rdzv(i),
            "--max-restarts", str(restarts),
            str(ROOT / "pivot" / "main.py"),
            "--model.policy", str(models[0]), "--model.genrm", str(models[1]),
            "--log.dir", str(run_dir), "--checkpoint.dir", str(run_dir / "checkpoints"),
            *SMALL, *flags,
        ]  # fmt: skip
        log = open(run_dir.parent / f"node{i + 1}.log", "w")  # noqa: SIM115 - the node writes it
        procs.append(hosts.start(i, argv, env, log, node2_private if i == 1 else ()))
        time.sleep(0.5)  # the rendezvous endpoint's host first
    return procs


def finish(procs: list[subprocess.Popen], run_dir: Path, within_s: float) -> str:
    deadline = time.monotonic() + within_s
    for p in procs:
        p.wait(timeout=max(1.0, deadline - time.monotonic()))
    logs = [(run_dir.parent / f"node{i + 1}.log").read_text() for i in range(2)]
    out = "\n".join(f"==== node{i + 1}\n{log[-4000:]}" for i, log in enumerate(logs))
    assert [p.returncode for p in procs] == [0, 0], out
    return out


def test_plain_run_shifts_on_both_hosts_reading_locally(
    hosts: TwoHosts, models: tuple[Path, Path], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    t0 = time.monotonic()
    # the chaos planner shifts on every tick, so both hosts' devices certainly move
    flags = ["--train.steps", "3", "--planner.strategy", "chaos", "--planner.interval-s", "0.05"]
    out = finish(launch(hosts, models, run_dir, 0, *flags), run_dir, 400)
    print(f"two hosts: plain run of 3 steps in {time.monotonic() - t0:.0f} s")
    assert exactly_once(run_dir, 3, B, G).violations == []
    timeline = rows(run_dir, "timeline.jsonl")
    ups = [e for e in timeline if e.get("event") == "shift_up" and e["role"] != "train"]
    moved = {
        d // 2
        for e in timeline
        if e.get("event") in ("shift_up", "shift_down")
        for d in e["devices"]
    }
    assert moved == {0, 1}, out
    assert ups and all(sum(e["gps_read_bytes"]) > 0 for e in ups)
    assert [e for e in ups if any(e["gps_remote_bytes"])] == []  # each host holds a full copy


def ranks_of(hosts: TwoHosts, node: int) -> dict[int, int]:
    """LOCAL_RANK -> PID of the Pivot ranks running on `node` now."""
    out = {}
    for pid in hosts.nodes[node].pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = dict(
                kv.split(b"=", 1)
                for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if b"=" in kv
            )
        except OSError:
            continue
        if b"pivot/main.py" in cmd and b"torch.distributed.run" not in cmd and b"LOCAL_RANK" in env:
            assert env[b"RANK"] != b"0", (
                "node 2 holds rank 0: the rendezvous ordered the nodes otherwise"
            )
            out[int(env[b"LOCAL_RANK"])] = pid
    return out


def newest_complete(ckpt: Path) -> int:
    return max(
        (int(p.parent.name.split("_")[1]) for p in ckpt.glob("step_*/manifest.json")), default=0
    )


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "local_rank0"])
def test_kill_on_node2_resumes_and_finishes_exactly_once(
    hosts: TwoHosts, models: tuple[Path, Path], tmp_path: Path, victim: int
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    steps, every = 6, 2
    flags = [
        "--train.steps",
        str(steps),
        "--checkpoint.every",
        str(every),
        "--checkpoint.resume",
        "auto",
    ]
    procs = launch(hosts, models, run_dir, 2, *flags)
    first = run_dir / "checkpoints" / f"step_{every:06d}" / "manifest.json"
    deadline = time.monotonic() + 400
    while not first.is_file():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), (
            "no first checkpoint"
        )
        time.sleep(0.2)
    pid = ranks_of(hosts, 1)[victim]
    newest = newest_complete(run_dir / "checkpoints")
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    resumed = None
    # A checkpoint can complete between reading `newest` and the kill (the /proc scan takes a
    # while): the resume must take the newest complete one when it resumes, which is read as soon
    # as its row appears (the next checkpoint is two training steps after it).
    at_resume = newest
    while any(p.poll() is None for p in procs) and time.monotonic() < killed + BOUND_S:
        if resumed is None and any(
            r.get("event") == "resume" for r in rows(run_dir, "timeline.jsonl")
        ):
            resumed = time.monotonic() - killed
            at_resume = newest_complete(run_dir / "checkpoints")
        time.sleep(0.2)
    finish(procs, run_dir, max(1.0, killed + BOUND_S - time.monotonic()))
    done = time.monotonic() - killed
    print(
        f"two hosts: node-2 local rank {victim} killed; resumed after {resumed} s, finished {done:.0f} s after the kill"
    )
    timeline = rows(run_dir, "timeline.jsonl")
    resumed_rows = [r for r in timeline if r.get("event") == "resume"]
    assert [r["step"] for r in resumed_rows] == [at_resume] and at_resume >= newest, resumed_rows
    assert resumes(timeline, every) == []
    assert exactly_once(run_dir, steps, B, G).violations == []
    log = (run_dir.parent / "node1.log").read_text()  # rank 0's: each attempt's first line
    starts = [line for line in log.splitlines() if line.startswith("pivot: preset ")]
    assert len(starts) >= 2 and ", attempt " in starts[-1], starts


def test_static_rendezvous_names_a_silent_rank_in_seconds(
    hosts: TwoHosts, models: tuple[Path, Path], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    procs = launch(hosts, models, run_dir, 0, "--train.steps", "40", rdzv=static)
    deadline = time.monotonic() + 400
    while not any(r.get("event") == "shift_up" for r in events(run_dir)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "no shift"
        time.sleep(0.2)
    stopped = ranks_of(hosts, 1)[1]
    os.kill(stopped, signal.SIGSTOP)  # alive to the kernel (its sockets stay open), silent to Pivot
    t0 = time.monotonic()
    procs[0].wait(timeout=120)
    noticed = time.monotonic() - t0
    os.kill(stopped, signal.SIGCONT)  # else host 2's agent waits 30 s before it SIGKILLs it
    procs[1].wait(timeout=120)  # host 2 goes too: its other rank finds rank 0 gone
    ended = time.monotonic() - t0
    log = (run_dir.parent / "node1.log").read_text()
    said = [line for line in log.splitlines() if "stopped answering" in line]
    print(
        f"two hosts, static: a silent rank noticed (host 1 ended) in {noticed:.1f} s, host 2 ended in {ended:.1f} s"
    )
    assert procs[0].returncode != 0 and said, log[-4000:]
    assert said[0].startswith(
        "pivot: rank 3 on host pivotnode2 stopped answering (no heartbeat for "
    ), said


def test_a_checkpoint_folder_host_2_does_not_share_stops_at_start(
    hosts: TwoHosts, models: tuple[Path, Path], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ckpt = run_dir / "checkpoints"
    procs = launch(hosts, models, run_dir, 0, node2_private=(ckpt,))
    for p in procs:
        p.wait(timeout=300)
    log = (run_dir.parent / "node1.log").read_text()
    said = [line for line in log.splitlines() if line.startswith("pivot: cannot start:")]
    assert [p.returncode for p in procs] != [0, 0] and said == [
        f"pivot: cannot start: checkpoint.dir {ckpt} is not shared: pivotnode2 cannot see a file "
        "rank 0 wrote there; checkpoints need a filesystem every host mounts at the same path "
        "(docs/multinode.md)"
    ], log[-3000:]
