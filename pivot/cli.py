"""Command line: `--preset NAME` or `--config FILE` picks the starting config, every other flag
overrides it (tyro).

A config file is YAML or JSON (by its suffix; a run folder's `config.json` is one) holding any
part of the config tree, `preset` among its keys: its values apply over that preset's (tiny-cpu
without one), then the flags over them. It is turned into the typed tree by msgspec, which names
the field of a value of the wrong type; a key the tree has not is refused by name. A file never
chooses where a run writes: its `log.dir` is ignored (a run's `config.json` names its own folder,
and a relaunch is a new run). `--print-config` prints the resolved config as such a file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys
import textwrap
import types
import typing
from pathlib import Path

import docstring_parser  # tyro's own dependency: tyro 1.0.17 reads field docstrings with it
import tyro

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # configs/ lives beside pivot/ and is not installed
    sys.path.insert(0, str(ROOT))

from configs.presets import PRESETS, get_preset  # noqa: E402
from pivot.bad_input import stop  # noqa: E402
from pivot.config import ConfigError, PivotConfig, deferred_checks  # noqa: E402
from pivot.rl.plugins import check_plugins  # noqa: E402

DESCRIPTION = (
    "Pivot: resource-shiftable RL post-training with a generative reward model. "
    f"Start from a preset with --preset NAME (one of: {', '.join(PRESETS)}; default tiny-cpu) "
    "or from a YAML or JSON file with --config FILE (a run folder's config.json is one; "
    "--print-config writes one), then override any field."
)

_LIST_ITEM = re.compile(r"([-*•]|\d+[.)])\s")


def _flowing(doc: str) -> str:
    """`doc` as flowing text: a single line break becomes a space; a blank line (paragraph break)
    and a line that starts a list item (`- `, `* `, `1. `) stay line breaks."""
    lines: list[str] = []
    for line in (s.strip() for s in inspect.cleandoc(doc).splitlines()):
        if lines and lines[-1] and line and not _LIST_ITEM.match(line):
            lines[-1] += " " + line
        else:
            lines.append(line)
    return "\n".join(lines)


@functools.cache
def _flowing_help(cls: type) -> None:
    """Give each field of `cls` and of the configs nested in it its docstring as flowing text, in
    field metadata "help", which tyro reads before the docstring
    (tyro/constructors/_struct_spec_dataclass.py:123), so --help wraps it to the terminal width.
    From the docstring, tyro 1.0.17 joins single line breaks before it dedents
    (tyro/_docstrings.py:296-297) and keeps a break before every line that does not start with a
    letter (tyro/_strings.py:250): every indented continuation line stayed a line of its own."""
    docs = {p.arg_name: p.description for p in docstring_parser.parse_from_object(cls).params}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        doc = docs.get(f.name)
        if doc and "help" not in f.metadata:
            f.metadata = types.MappingProxyType({**f.metadata, "help": _flowing(doc)})
        for t in (hints[f.name], *typing.get_args(hints[f.name])):
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                _flowing_help(t)


def _description() -> str:
    """DESCRIPTION wrapped to the terminal width, two spaces in. tyro prints the description as
    it is (tyro/_backends/_tyro_help_formatting.py:469) once it has joined each line break before a
    line that starts with a letter (tyro/_parsers.py:299, tyro/_strings.py:250): a line that starts
    with a space keeps its break."""
    width = shutil.get_terminal_size().columns  # what tyro wraps the option boxes to
    return textwrap.fill(
        DESCRIPTION, width, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )


def _split_flag(argv: list[str], flag: str, default: str, what: str) -> tuple[str, list[str]]:
    """(the value of `flag` given as `--flag VALUE` or `--flag=VALUE`, else `default`; the other
    arguments). `what` names the value in the error for a flag given without one."""
    value, rest, i = default, [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag:
            if i + 1 >= len(argv):
                raise ConfigError(f"{flag.lstrip('-')}: {flag} needs {what}")
            value, i = argv[i + 1], i + 2
            continue
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return value, rest


def _unknown_keys(data: dict, cls: type, where: str = "") -> list[str]:
    """Keys of `data` (nested) that `cls`'s dataclass tree has no field for."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    out = []
    for key, value in data.items():
        name = f"{where}{key}"
        if key not in fields:
            out.append(name)
        elif isinstance(value, dict) and dataclasses.is_dataclass(hints[key]):
            out += _unknown_keys(value, hints[key], name + ".")
    return out


def _merged(base: dict, over: dict) -> dict:
    return {
        k: _merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
        for k, v in {**base, **over}.items()
    }


def load_config(path: str) -> PivotConfig:
    """The config a YAML or JSON file describes (module docstring); ConfigError in one line."""
    import msgspec
    import yaml

    file = Path(path)
    try:
        text = file.read_text()
        data = yaml.safe_load(text) if file.suffix in (".yaml", ".yml") else json.loads(text)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"config: {path}: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config: {path} holds no mapping of config sections")
    if unknown := _unknown_keys(data, PivotConfig):
        raise ConfigError(
            f"config: {path}: {unknown[0]!r} is no config field ({len(unknown)} unknown in all; "
            "--print-config shows every one)"
        )
    preset = str(data.get("preset", "tiny-cpu"))
    if preset not in PRESETS:
        raise ConfigError(f"config: {path}: preset {preset!r} is not one of {', '.join(PRESETS)}")
    data.get("log", {}).pop("dir", None)  # where a run writes is never the file's choice
    base = json.loads(json.dumps(dataclasses.asdict(get_preset(preset))))
    try:
        with deferred_checks():
            return msgspec.convert(_merged(base, data), PivotConfig)
    except msgspec.ValidationError as e:
        raise ConfigError(f"config: {path}: {e}") from None


def config_text(cfg: PivotConfig) -> str:
    """`cfg` as the YAML `--config` takes (`--print-config`): every field, no run folder."""
    import yaml

    data = json.loads(json.dumps(dataclasses.asdict(cfg)))
    data["print_config"] = False
    data["log"]["dir"] = ""
    return yaml.safe_dump(data, sort_keys=False)


def _bare_resume(argv: list[str]) -> list[str]:
    """`--checkpoint.resume` with no value (before another flag or at the end) means `yes`."""
    out = []
    for i, arg in enumerate(argv):
        out.append(arg)
        if arg == "--checkpoint.resume" and (i + 1 == len(argv) or argv[i + 1].startswith("--")):
            out.append("yes")
    return out


def _given(argv: list[str], flag: str) -> bool:
    """Whether `flag` (as `--flag value` or `--flag=value`) is on the command line."""
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def parse(
    argv: list[str], world_size: int | None = None, local_world_size: int | None = None
) -> PivotConfig:
    """Parse and validate; raises ConfigError (naming field and value) on bad input."""
    file, rest = _split_flag(_bare_resume(argv), "--config", "", "a file")
    name, rest = _split_flag(rest, "--preset", "tiny-cpu", "a name")
    if file and _given(argv, "--preset"):
        raise ConfigError("config: give --preset or --config, not both (a file names its preset)")
    default = load_config(file) if file else get_preset(name)
    name = default.preset if file else name
    _flowing_help(PivotConfig)
    with deferred_checks():
        cfg = tyro.cli(PivotConfig, default=default, args=rest, description=_description())
    cfg.preset = name
    if _given(rest, "--reward.judge-template") and not _given(rest, "--reward.judge-template-file"):
        cfg.reward.judge_template_file = ""  # a template typed here replaces the preset's file
    if cfg.print_config:  # as given, for any world: a launch fits and validates it
        return cfg
    if cfg.dry_run:  # no torchrun: the cluster is the one the dry run plans (pivot/memory/fit.py)
        from pivot.memory.report import dry_run_shape

        nnodes, per_node = dry_run_shape(cfg)
        world_size, local_world_size = nnodes * per_node, per_node
    world = world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", "1"))
    local = (
        local_world_size
        if local_world_size is not None
        else int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    )
    fitted = cfg.fit_world(world)  # a paper preset's training pool: its share of this world
    fitted.validate(world, local)
    if (
        cfg.cluster.device == "emulated"
    ):  # the emulated models must fit this cluster as the simulator sees it
        from pivot.emulate import EmulatedCosts, runtime_config
        from pivot.sim import SimConfigError

        try:
            EmulatedCosts(runtime_config(fitted), world, local)
        except SimConfigError as e:
            raise ConfigError(str(e)) from None
    check_plugins(cfg.reward)
    if cfg.log.wandb and importlib.util.find_spec("wandb") is None:
        raise ConfigError("log.wandb=True: wandb is not installed (pip install wandb)")
    return cfg if cfg.dry_run else fitted  # the dry run fits each world it tries itself


def parse_or_exit(argv: list[str]) -> PivotConfig:
    """Parse on every rank; only rank 0 speaks (help text, tyro's and our errors), exit code 2,
    and every rank leaves the line for torchrun's summary (pivot/bad_input.py)."""
    quiet = os.environ.get("RANK", "0") != "0"
    try:
        with (
            open(os.devnull, "w") as null,
            contextlib.redirect_stdout(null if quiet else sys.stdout),
            contextlib.redirect_stderr(null if quiet else sys.stderr),
        ):
            return parse(argv)
    except ConfigError as e:
        raise SystemExit(stop([f"pivot: config error: {e}"])) from None
    except SystemExit as e:  # tyro's usage error (its box is on rank 0's stderr), or --help
        if e.code not in (0, None):
            raise SystemExit(
                stop(
                    [
                        "pivot: config error: the command line was not accepted "
                        "(tyro's message is on rank 0's stderr; --help lists every flag)"
                    ],
                    speak=False,
                )
            ) from None
        raise
