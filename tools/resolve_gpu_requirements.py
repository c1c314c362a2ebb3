"""Does `requirements-gpu.txt` resolve? pip's resolver in dry-run mode for the GPU platform (Linux
x86_64, CPython 3.11, binary wheels only), from any machine: nothing is installed. Slow (about 4
minutes, pip reads the metadata of ~200 packages), so it is a tool, not a test; the cheap part
(the pins against sglang's own pins) is tests/tools/test_gpu_requirements.py.

    python tools/resolve_gpu_requirements.py [--python-version 3.11] [--report FILE]

Prints `PASS gpu-requirements: N packages (torch X, sglang Y, ...)` or `FAIL gpu-requirements:
<pip's conflict>` and exits 1 on FAIL.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# glibc 2.34 machines accept every older manylinux tag; pip wants each tag named
PLATFORMS = [
    f"manylinux_2_{v}_x86_64"
    for v in (34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 12, 5)
] + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
SHOWN = (
    "torch",
    "sglang",
    "vllm",
    "tokenizers",
    "transformers",
    "numpy",
    "nixl-cu13",
    "flashinfer-python",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--requirements", default=str(ROOT / "requirements-gpu.txt"))
    ap.add_argument("--python-version", default="3.11")
    ap.add_argument("--report", default="", help="keep pip's JSON install report here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(a.report or Path(tmp) / "report.json")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--target",
            str(Path(tmp) / "target"),
            "--report",
            str(report),
            "--python-version",
            a.python_version,
            "--implementation",
            "cp",
            "--only-binary=:all:",
            "-r",
            a.requirements,
        ]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            lines = [
                x
                for x in res.stderr.splitlines()
                if x.startswith("ERROR") or "depends on" in x or "requested" in x
            ]
            print(
                f"FAIL gpu-requirements: pip exit {res.returncode}: {' | '.join(lines[:12]) or res.stderr[-500:]}"
            )
            return 1
        items = json.loads(report.read_text())["install"]
    versions = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in items}
    shown = ", ".join(f"{n} {versions[n]}" for n in SHOWN if n in versions)
    print(
        f"PASS gpu-requirements: {len(versions)} packages resolve for CPython {a.python_version} linux x86_64 ({shown})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
