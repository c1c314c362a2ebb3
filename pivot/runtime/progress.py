"""Rank 0's progress bar: step, reward, accuracy and devices per role (rich)."""
from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class StepProgress:
    def __init__(self, total: int, start: int, enabled: bool) -> None:
        self.enabled = enabled
        if not enabled:
            return
        self.bar = Progress(
            TextColumn("[bold]pivot"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"), refresh_per_second=4,
        )
        self.task = self.bar.add_task("steps", total=total, completed=start, info="rolling out...")
        self.bar.start()

    def update(self, done: int, metrics: dict[str, float], devices: dict[str, int]) -> None:
        line = (f"reward {metrics.get('reward/mean', 0):.3f} acc {metrics.get('reward/accuracy', 0):.3f} "
                f"| RO={devices['rollout']} RM={devices['reward']} TR={devices['train']}")
        if self.enabled:
            self.bar.update(self.task, completed=done, info=line)
        else:
            print(f"step {done}: {line}", flush=True)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
