"""Rank 0's progress bar: step, reward, accuracy, devices per role and the last held-out accuracy (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pivot.rl.evaluation import EvalResult


class StepProgress:
    def __init__(self, total: int, start: int, enabled: bool) -> None:
        # a live bar only on a terminal: piped to a file (a Slurm log, `| tee`) it would show
        # nothing until the end, so there every step prints its own line
        self.enabled = enabled and Console().is_terminal
        self.heldout = ""
        if not self.enabled:
            return
        self.bar = Progress(
            TextColumn("[bold]pivot"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            refresh_per_second=4,
        )
        self.task = self.bar.add_task("steps", total=total, completed=start, info="rolling out...")
        self.bar.start()

    def eval(self, result: EvalResult) -> None:
        self.heldout = f" | held-out {result.accuracy:.3f} @{result.step}"
        line = (
            f"eval after step {result.step}: held-out accuracy {result.accuracy:.3f} "
            f"({result.prompts} prompts, greedy, {result.seconds:.1f}s)"
        )
        if self.enabled:
            self.bar.console.print(line)
        else:
            print(line, flush=True)

    def update(self, done: int, metrics: dict[str, float], devices: dict[str, int]) -> None:
        line = (
            f"reward {metrics.get('reward/mean', 0):.3f} acc {metrics.get('reward/accuracy', 0):.3f} "
            f"| RO={devices['rollout']} RM={devices['reward']} TR={devices['train']}{self.heldout}"
        )
        if self.enabled:
            self.bar.update(self.task, completed=done, info=line)
        else:
            print(f"step {done}: {line}", flush=True)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
