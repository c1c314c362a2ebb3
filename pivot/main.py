"""Pivot's entry point. Every rank runs this file under torchrun (one SPMD program):

    torchrun --standalone --nproc-per-node 4 pivot/main.py [--preset NAME] [flags]

It parses and validates the config and checks its files (pivot/preflight.py) before any process
group exists, initialises torch.distributed (NCCL with CUDA, else gloo), creates every role
slot's process group, and runs the worker loop; rank 0 also runs the controller in a background
thread. With --dry-run it prints the memory plan instead (no torchrun, no GPU; see
pivot/memory/report.py), after the same file checks: exit code 2 on any problem. Bad input
stops every rank with exit code 2 and one line per problem from rank 0, which torchrun's summary
names as the root cause (pivot/bad_input.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script by torchrun: make `pivot` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pivot.cli import parse_or_exit  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    cfg = parse_or_exit(sys.argv[1:] if argv is None else argv)
    if cfg.print_config:
        from pivot.cli import config_text

        print(config_text(cfg), end="")
        return 0
    from pivot.bad_input import stop
    from pivot.preflight import preflight_problems

    # before any process group, on every rank: one line each from rank 0, exit 2, nothing falls back
    problems = preflight_problems(cfg)
    if not cfg.dry_run:  # this host's kernels and engines: a dry run plans for GPUs elsewhere
        from pivot.engine_check import engine_problems
        from pivot.kernels import missing_kernels

        problems += missing_kernels(cfg.model) + engine_problems(cfg)
    if problems:
        return stop([f"pivot: cannot start: {line}" for line in problems])
    if cfg.dry_run:
        from pivot.memory.report import dry_run
        from pivot.preflight import dataset_warnings

        for line in dataset_warnings(cfg):
            print(line, file=sys.stderr, flush=True)
        return dry_run(cfg)
    from pivot.runtime.job.launch import run

    backend = None
    if (
        cfg.cluster.device == "emulated"
    ):  # the runtime never imports pivot/emulate/: it is handed it here
        from pivot.emulate.backend import EmulatedDevices

        backend = EmulatedDevices()
    try:
        return run(cfg, backend)
    except Exception:
        from pivot.runtime.job.launcher_watch import EXIT_CODE, launcher_gone

        if launcher_gone():  # torchrun died: the errors of peers ending with it are no news
            os._exit(EXIT_CODE)
        raise
    except KeyboardInterrupt:  # Ctrl-C reaches every rank: one line from rank 0, no tracebacks
        if os.environ.get("RANK", "0") == "0":
            from pivot.runtime.job.inputs import chosen_run_dir
            from pivot.runtime.job.launch import resume_hint, tell
            from pivot.runtime.records.checkpoint import Checkpointer
            from pivot.runtime.records.latest import latest_run

            # without --log.dir: the folder rank 0 chose (runs/latest names it once it started)
            run_dir = Path(cfg.log.dir) if cfg.log.dir else (chosen_run_dir() or latest_run())
            tell(f"\npivot: interrupted.\n{resume_hint(Checkpointer(cfg.checkpoint, run_dir))}")
        return 130


if __name__ == "__main__":
    code = main()
    # everything the job held is released; what is left is the interpreter's teardown, whose
    # last full collection walks every object torch and the models made: about 0.6 CPU-s per
    # rank, which four ranks on two cores pay one after another. Frozen objects are skipped by
    # it (atexit handlers, flushes and module teardown still run; the OS frees the rest)
    import gc

    gc.freeze()
    raise SystemExit(code)
