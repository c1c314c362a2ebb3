"""Two hosts on one machine: two Linux network namespaces joined by a veth pair, each node's
processes in their own UTS (hostname), mount (/etc/hosts, /dev/shm), IPC and PID namespaces, as
a Slurm job's two nodes would be. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN).

Traffic stays on the addresses made here (a private /24 inside the pair; another pair made by a
concurrent test is a network of its own, so the addresses may repeat). `close` kills everything
started in the nodes (killing a PID namespace's first process ends every process in it) and
deletes both namespaces, which takes the veth pair and the nodes' /dev/shm with them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

SUBNET = "10.77.0"


@dataclass
class Node:
    netns: str
    addr: str
    hostname: str
    procs: list[subprocess.Popen] = field(default_factory=list)

    def pids(self) -> list[int]:
        """Every process now in this node's network namespace (PIDs as this machine sees them)."""
        want = os.stat(f"/run/netns/{self.netns}").st_ino
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}/ns/net").st_ino == want:
                        out.append(int(entry))
                except OSError:  # gone meanwhile, or a kernel thread
                    pass
        return out


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def namespaces_problem() -> str | None:
    """Why two namespaced nodes cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    probe = f"pvprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"cannot make a network namespace: {getattr(e, 'stderr', '') or e}".strip()
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class TwoHosts:
    """`nodes[0]` at SUBNET.1, `nodes[1]` at SUBNET.2; `/etc/hosts` of both names both."""

    def __init__(self, workdir: Path) -> None:
        tag = uuid.uuid4().hex[:6]
        self.nodes = [
            Node(f"pv{tag}n{i + 1}", f"{SUBNET}.{i + 1}", f"pivotnode{i + 1}") for i in range(2)
        ]
        self.hosts_file = workdir / "hosts"
        self.hosts_file.write_text(
            "127.0.0.1 localhost\n" + "".join(f"{n.addr} {n.hostname}\n" for n in self.nodes)
        )
        self._veth = (f"pv{tag}a", f"pv{tag}b")  # interface names: 15 characters at most
        self._made: list[str] = []

    def __enter__(self) -> TwoHosts:
        try:
            for n in self.nodes:
                _ip("netns", "add", n.netns)
                self._made.append(n.netns)
            _ip("link", "add", self._veth[0], "type", "veth", "peer", "name", self._veth[1])
            for n, veth in zip(self.nodes, self._veth):
                _ip("link", "set", veth, "netns", n.netns)
                _ip("-n", n.netns, "addr", "add", f"{n.addr}/24", "dev", veth)
                _ip("-n", n.netns, "link", "set", veth, "up")
                _ip("-n", n.netns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(
        self,
        node: int,
        argv: list[str],
        env: dict[str, str],
        log: IO[str],
        private: tuple[Path, ...] = (),
    ) -> subprocess.Popen:
        """Run `argv` as the first process of node `node`'s PID namespace; the folders in
        `private` are this node's own (empty) there instead of shared with the other node."""
        n = self.nodes[node]
        own = "".join(f"mkdir -p {d} && mount -t tmpfs tmpfs {d} && " for d in private)
        setup = (
            f"hostname {n.hostname} && mount -t tmpfs -o size=1g tmpfs /dev/shm && "
            f'mount --bind {self.hosts_file} /etc/hosts && {own}exec "$@"'
        )
        cmd = [
            "ip", "netns", "exec", n.netns,
            "unshare", "--uts", "--mount", "--ipc", "--pid", "--fork", "--kill-child",
            "--mount-proc",
            "sh", "-c", setup, "sh", *argv,
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, text=True
        )
        n.procs.append(proc)
        return proc

    def close(self) -> None:
        for n in self.nodes:
            for proc in n.procs:
                if proc.poll() is None:
                    try:
                        os.killpg(
                            proc.pid, signal.SIGKILL
                        )  # unshare --kill-child: the node's PID 1 too
                    except ProcessLookupError:
                        pass
                proc.wait(timeout=30)
            if n.netns in self._made:
                for pid in n.pids():  # anything that outlived its PID namespace's end
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        for name in self._made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()
