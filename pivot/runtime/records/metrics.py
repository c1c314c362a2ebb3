"""Run records on rank 0: per-step metrics (JSONL + TensorBoard) and the timeline (JSONL).

`metrics.jsonl`: one row per RL step. `eval.jsonl`: one row per held-out evaluation.
Every record numbers steps as the console and the checkpoints do: a step is the count of steps
done after it (1 for the first trained), an eval's and a checkpoint's the steps done before them.
`timeline.jsonl`: rows of kind "sample" (time, devices per role, tokens/s per role) every
monitor tick, and kind "shift" (a shift's roles, devices and phase timings).
`tools/plot_timeline.py` renders the timeline like the paper's Figure 10.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pivot.rl.evaluation import EvalResult


class RunLog:
    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool,
        resume_step: int | None = None,
        wandb_project: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """`resume_step`: continuing from a checkpoint of that step, so rows of later steps
        (trained by the killed run after its last checkpoint, and trained again now) go.
        `wandb_project`: also log to Weights & Biases (offline unless WANDB_MODE is set)."""
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        # a metrics or sample row's step is the step trained (1 for the first), an eval's the steps
        # done before it: the checkpoint after `resume_step` steps keeps the rows of steps up to
        # it, and the eval at it runs again
        for name, kept in (("metrics.jsonl", 1), ("samples.jsonl", 1), ("eval.jsonl", 0)):
            file = self.dir / name
            if file.is_file():
                rows = [] if resume_step is None else read_jsonl(file)
                done = [
                    r for r in rows if resume_step is not None and r["step"] < resume_step + kept
                ]
                file.write_text("".join(json.dumps(r) + "\n" for r in done))
        self.t0 = time.monotonic()
        self._metrics = (self.dir / "metrics.jsonl").open("a")
        self._timeline = (self.dir / "timeline.jsonl").open("a" if resume_step is not None else "w")
        self._samples = (self.dir / "samples.jsonl").open("a")
        self._eval = (self.dir / "eval.jsonl").open("a")
        self._wandb = _start_wandb(wandb_project, self.dir, config) if wandb_project else None
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.dir / "tb"))

    def now(self) -> float:
        return time.monotonic() - self.t0

    def step(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, "time": round(self.now(), 3), **metrics}
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()
        self._scalars(step, metrics)

    def eval(self, result: EvalResult) -> None:
        """A held-out evaluation; its step is the number of training steps before it."""
        row = {"step": result.step, "time": round(self.now(), 3), **asdict(result)}
        self._eval.write(json.dumps(row) + "\n")
        self._eval.flush()
        self._scalars(
            result.step,
            {"eval/accuracy": result.accuracy, "eval/response_len": result.response_len},
        )

    def _scalars(self, step: int, metrics: dict[str, float]) -> None:
        numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        if self._tb is not None:
            for key, value in numbers.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(numbers, step=step)

    def samples(self, records: list[dict[str, Any]]) -> None:
        """One row per trained sample: key, policy version, reward parts, response."""
        self._samples.writelines(json.dumps(r) + "\n" for r in records)
        self._samples.flush()

    def sample(self, devices: dict[str, int], throughput: dict[str, float], **extra: Any) -> None:
        self._write(
            {
                "kind": "sample",
                "time": round(self.now(), 3),
                "devices": devices,
                "throughput": throughput,
                **extra,
            }
        )

    def shift(self, **event: Any) -> None:
        self._write({"kind": "shift", "time": round(self.now(), 3), **event})

    def _write(self, row: dict[str, Any]) -> None:
        self._timeline.write(json.dumps(row) + "\n")
        self._timeline.flush()

    def close(self) -> None:
        self._samples.close()
        self._metrics.close()
        self._timeline.close()
        self._eval.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with Path(path).open() as f:
        return [json.loads(line) for line in f if line.strip()]


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a run's JSONL file; none when the run has not written it."""
    return read_jsonl(path) if Path(path).is_file() else []


def _start_wandb(project: str, run_dir: Path, config: dict[str, Any] | None) -> Any:
    """A W&B run writing under the run folder; offline unless the user set WANDB_MODE (clusters
    often have no route out, and a run must never wait on one)."""
    import wandb  # checked at start-up (pivot.cli), not a dependency otherwise

    os.environ.setdefault("WANDB_MODE", "offline")
    return wandb.init(project=project, dir=str(run_dir), config=config, name=run_dir.name)
