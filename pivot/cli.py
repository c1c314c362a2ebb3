"""Command line: `--preset NAME` picks the starting config, every other flag overrides it (tyro)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

import tyro

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # configs/ lives beside pivot/ and is not installed
    sys.path.insert(0, str(ROOT))

from configs.presets import PRESETS, get_preset  # noqa: E402
from pivot.config import ConfigError, PivotConfig, deferred_checks  # noqa: E402
from pivot.rl.plugins import check_plugins  # noqa: E402

DESCRIPTION = (
    "Pivot: resource-shiftable RL post-training with a generative reward model. "
    f"Start from a preset with --preset NAME (one of: {', '.join(PRESETS)}; default tiny-cpu), "
    "then override any field."
)


def _split_preset(argv: list[str]) -> tuple[str, list[str]]:
    name, rest, i = "tiny-cpu", [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--preset":
            if i + 1 >= len(argv):
                raise ConfigError("preset: --preset needs a name")
            name, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--preset="):
            name = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return name, rest


def _bare_resume(argv: list[str]) -> list[str]:
    """`--checkpoint.resume` with no value (before another flag or at the end) means `yes`."""
    out = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--checkpoint.resume" and (i + 1 == len(argv) or argv[i + 1].startswith("--")):
            out.append("yes")
    return out


def parse(
    argv: list[str], world_size: int | None = None, local_world_size: int | None = None
) -> PivotConfig:
    """Parse and validate; raises ConfigError (naming field and value) on bad input."""
    name, rest = _split_preset(_bare_resume(argv))
    default = get_preset(name)
    with deferred_checks():
        cfg = tyro.cli(PivotConfig, default=default, args=rest, description=DESCRIPTION)
    cfg.preset = name
    if cfg.dry_run:  # no torchrun: the cluster is the configured one
        from pivot.memory.report import dry_run_shape

        nnodes, per_node = dry_run_shape(cfg)
        world_size, local_world_size = nnodes * per_node, per_node
    world = world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", "1"))
    local = (
        local_world_size
        if local_world_size is not None
        else int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    )
    cfg.validate(world, local)
    if (
        cfg.cluster.device == "emulated"
    ):  # the emulated models must fit this cluster as the simulator sees it
        from pivot.emulate import EmulatedCosts, runtime_config
        from pivot.sim import SimConfigError

        try:
            EmulatedCosts(runtime_config(cfg), world, local)
        except SimConfigError as e:
            raise ConfigError(str(e)) from None
    check_plugins(cfg.reward)
    if cfg.log.wandb and importlib.util.find_spec("wandb") is None:
        raise ConfigError("log.wandb=True: wandb is not installed (pip install wandb)")
    return cfg


def parse_or_exit(argv: list[str]) -> PivotConfig:
    """Parse on every rank; only rank 0 speaks (help text, tyro's and our errors), exit code 2."""
    quiet = os.environ.get("RANK", "0") != "0"
    with (
        open(os.devnull, "w") as null,
        contextlib.redirect_stdout(null if quiet else sys.stdout),
        contextlib.redirect_stderr(null if quiet else sys.stderr),
    ):
        try:
            return parse(argv)
        except ConfigError as e:
            print(f"pivot: config error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
