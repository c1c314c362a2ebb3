"""The timeline plot renders a PNG from a timeline.jsonl, recoveries marked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_plot_timeline(tmp_path: Path) -> None:
    rows = [
        {
            "kind": "sample",
            "time": t * 0.2,
            "devices": {"rollout": 2, "reward": 1, "train": t % 2},
            "throughput": {"rollout": 100.0 + t, "reward": 50.0},
        }
        for t in range(10)
    ]
    rows.append({"kind": "shift", "time": 0.5, "event": "plan", "up": [], "down": []})
    for event, at in (("engine_failed", 0.7), ("engine_rebuilt", 0.9), ("replica_retired", 1.1)):
        rows.append({"kind": "shift", "time": at, "event": event, "role": "rollout", "slot": 0})
    rows.append({"kind": "shift", "time": 1.3, "event": "train_split", "micro_batch_tokens": 2048})
    rows.append({"kind": "shift", "time": 1.5, "event": "train_resized", "was": 4, "devices": 2})
    timeline = tmp_path / "timeline.jsonl"
    timeline.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "plot_timeline.py"), str(timeline)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    png = tmp_path / "timeline.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
