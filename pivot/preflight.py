"""What a run needs from the filesystem and the user's files, checked on every rank before any
process group exists (and by `--dry-run`, which the sbatch template runs before torchrun): the
datasets' first rows, the model folders' headers, the judge template's placeholders and the run
and checkpoint folders' writability. One line per problem, naming the flag and its value, as a
ConfigError does; pivot/main.py prints them from rank 0 and exits 2 (pivot/bad_input.py).

Each check reads little (a dataset's first rows, safetensors headers), so a 17K-row parquet or a
72B checkpoint costs well under a second. The runtime checks again after the process group is
up (pivot/runtime/job/inputs.py), against what it really loads: a resumed checkpoint's policy.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from pivot.config import ConfigError, DataConfig, PivotConfig, RewardConfig
from pivot.runtime.records.latest import RUNS  # where a run without --log.dir gets its folder

HEAD_ROWS = 16
"""Rows read from the top of a dataset. The run skips (and counts) bad rows, so the check asks
for one usable row among them, not for every row: none usable is a wrong key or a wrong file."""
PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")
JUDGE_FIELDS = ("question", "response")
"""The placeholders `pivot.rl.reward.judge_prompt` fills in; any other `{name}` would reach the
GenRM as it is written."""


def preflight_problems(cfg: PivotConfig) -> list[str]:
    """Every problem found, one line each (empty: the run can start). Under `--dry-run` a preset's
    own model folder that does not exist is no problem (planning for GPUs elsewhere: the plan
    estimates it from --model.*-params-b); a folder given on the command line must exist."""
    return [
        *dataset_problems(cfg),
        *model_problems(cfg),
        *judge_template_problems(cfg.reward),
        *folder_problems(cfg),
    ]


def dataset_problems(cfg: PivotConfig) -> list[str]:
    """--data.path and --eval.path (read with the --data keys): each exists and one of its first
    rows is a prompt with an answer."""
    out = []
    for flag, path in (("--data.path", cfg.data.path), ("--eval.path", cfg.eval.path)):
        if path:  # empty: the synthetic task
            problem = head_problem(Path(path), dataclasses.replace(cfg.data, path=path))
            if problem:
                out.append(f"{problem} ({flag})")
    return out


def head_problem(path: Path, config: DataConfig) -> str | None:
    """What is wrong with the dataset's first HEAD_ROWS rows as the run would read them (none
    usable, the file missing or unreadable), in `pivot.rl.data`'s words; None when one is usable."""
    from pivot.rl.data import rows_to_dataset

    try:
        rows, where = _head_rows(path)
        cut = f" (its first {HEAD_ROWS} rows)" if len(rows) == HEAD_ROWS else ""
        rows_to_dataset(rows, config, f"dataset {path}{cut}", where)
    except (OSError, ValueError) as e:
        return str(e)
    return None


def dataset_warnings(cfg: PivotConfig) -> list[str]:
    """The line the run will print for rows it skips (a malformed JSON line, a row without the
    prompt), for the rows `--dry-run` reads: a usable dataset with bad rows starts, so a dry run
    says so rather than passing in silence."""
    from pivot.rl.data import rows_to_dataset, skipped_rows_line

    out: list[str] = []
    for path in filter(None, (cfg.data.path, cfg.eval.path)):
        try:
            rows, where = _head_rows(Path(path))
            config = dataclasses.replace(cfg.data, path=path)
            cut = f" (its first {HEAD_ROWS} rows)" if len(rows) == HEAD_ROWS else ""
            dataset = rows_to_dataset(rows, config, f"{path}{cut}", where)
        except (OSError, ValueError):
            continue  # a problem, reported as one (dataset_problems)
        out += filter(None, [skipped_rows_line(dataset)])
    return out


def _head_rows(path: Path) -> tuple[list[Any], list[str] | None]:
    """The first HEAD_ROWS rows and, for JSONL, their line numbers: `pivot.rl.data._read_rows`
    on the file's top only (it reads the whole file)."""
    # the run's own reader of one JSONL line: a line counts here as the run counts it
    from pivot.rl.data import _jsonl_row

    if not path.is_file():
        raise FileNotFoundError(f"dataset {path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            batch = next(pq.ParquetFile(path).iter_batches(batch_size=HEAD_ROWS), None)
        except (pa.ArrowException, OSError) as e:
            raise ValueError(
                f"dataset {path}: not a readable parquet file ({' '.join(str(e).split())})"
            ) from None
        return ([] if batch is None else batch.to_pylist()), None
    if path.suffix in (".jsonl", ".json"):
        rows, where = [], []
        with path.open("rb") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    rows.append(_jsonl_row(line.rstrip(b"\r\n")))
                    where.append(f"line {n}")
                    if len(rows) == HEAD_ROWS:
                        break
        return rows, where
    raise ValueError(f"dataset {path}: unknown format {path.suffix!r} (use .parquet or .jsonl)")


def model_problems(cfg: PivotConfig) -> list[str]:
    """--model.policy and --model.genrm: Hugging Face folders whose config.json and safetensors
    headers agree (`check_folder`, no tensor data read). Resuming, the policy's weights come from
    the checkpoint (runtime/job/inputs.py checks those): its folder needs only its config.json."""
    from pivot.model import ModelArgs
    from pivot.model.hf_folder import check_folder

    out = []
    for flag, folder, weights in (
        ("model.policy", cfg.model.policy, cfg.checkpoint.resume == "no"),
        ("model.genrm", cfg.model.genrm, True),
    ):
        if not folder:  # the embedded tiny model: inputs.py checks it against its manifest
            continue
        path = Path(folder)
        if not path.exists():
            if not (cfg.dry_run and folder == _preset_default(cfg.preset, flag)):
                out.append(f"{flag}={folder!r}: no such folder")
            continue
        if not path.is_dir():
            out.append(f"{flag}={folder!r}: not a folder (a Hugging Face model folder is)")
            continue
        try:
            check_folder(path) if weights else ModelArgs.load(path)
        except (OSError, ValueError) as e:
            out.append(f"{flag}={folder!r}: {' '.join(str(e).split())}")
    return out


def _preset_default(preset: str, flag: str) -> str:
    """The model folder `preset` names for `flag` (model.policy or model.genrm)."""
    from configs.presets import get_preset

    return str(getattr(get_preset(preset).model, flag.split(".")[1]))


def judge_template_problems(reward: RewardConfig) -> list[str]:
    """A `{name}` in the judge template other than {question} and {response}: `judge_prompt`
    fills in only those two, so any other reaches the GenRM as written. (The file's existence and
    the two required fields are `check_plugins`'s, run while parsing.)"""
    from pivot.rl.plugins import judge_template

    try:
        template = judge_template(reward)
    except ConfigError as e:
        return [str(e)]
    if not template:
        return []
    flag = (
        f"reward.judge_template_file={reward.judge_template_file!r}"
        if reward.judge_template_file
        else "reward.judge_template"
    )
    unknown = sorted(set(PLACEHOLDER.findall(template)) - set(JUDGE_FIELDS))
    if not unknown:
        return []
    names = ", ".join(f"{{{n}}}" for n in unknown)
    return [
        f"{flag}: unknown placeholder {names}: only {{question}} and {{response}} are filled in "
        "(the GenRM would read the rest as written)"
    ]


def folder_problems(cfg: PivotConfig) -> list[str]:
    """--log.dir (empty: runs/, where each run gets a new folder) and the checkpoint folder
    (--checkpoint.dir, else <log.dir>/checkpoints): each is a folder this process can write, or
    can be created under the nearest one that exists. Nothing is created (a dry run leaves no
    folder behind)."""
    run_dir = Path(cfg.log.dir or RUNS)
    out = []
    if problem := writable_problem(run_dir):
        out.append(f"log.dir={cfg.log.dir!r}: {problem}")
    if cfg.checkpoint.dir:
        ckpt = Path(cfg.checkpoint.dir)
        if problem := writable_problem(ckpt):
            out.append(f"checkpoint.dir={cfg.checkpoint.dir!r}: {problem}")
    elif cfg.log.dir and not out:  # a problem of log.dir is one of its checkpoints/: said once
        if problem := writable_problem(run_dir / "checkpoints"):
            out.append(f"log.dir={cfg.log.dir!r} (its checkpoints/): {problem}")
    return out


def writable_problem(folder: Path) -> str | None:
    """Why `folder` cannot be written (or created), or None: its nearest existing ancestor (or
    itself) must be a folder this process may write into."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder" if probe == folder else f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable by this user" + (
            "" if probe == folder else " (the folder would be created in it)"
        )
    return None
