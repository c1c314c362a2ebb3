"""Prompt datasets in DAPO-Math / veRL format (parquet or jsonl) and a resumable, shuffling cursor.

A row holds a prompt (plain text, or chat messages `[{"role", "content"}, ...]`) and a
ground-truth answer. Field names come from `pivot.config.DataConfig`; dots reach into nested
fields, so DAPO's `reward_model.ground_truth` and a flat `ground_truth` both work: the
configured `answer_key` is tried first, then `reward_model.ground_truth`, then `ground_truth`.

veRL's layout loads as it is, without flags: the columns its preprocessing scripts write
(`examples/data_preprocess/gsm8k.py`, `math_dataset.py`; DAPO-Math-17k has the same) are
`data_source`, `prompt` (chat messages), `ability`, `reward_model` {`style`, `ground_truth`} and
`extra_info` (a struct). `data_source` and `extra_info` ride along with each prompt to a
veRL-style verifier (`pivot.rl.plugins`); `extra_info` is kept as plain JSON (a value JSON cannot
hold, such as a timestamp, becomes its str) because prompts are checkpointed as JSON.

Chat prompts are kept as messages (the RL flow renders them with the policy's chat template when
it has one, see `DataConfig.chat_template`) and also rendered to text, the form a policy without
a template is fed and the judge sees: a lone user message is its content verbatim (what the tiny
tokenizer expects), several messages are joined as "role: content" lines.

Rows with a missing field, an empty prompt, a wrong type, broken JSON or bytes that are not
UTF-8 are skipped and counted in `DataStats`; a dataset with no valid row, or a file that is not
readable as its format, is an error naming the file. The built-in synthetic set is not this
module's: `pivot.tiny.task` gives it where `path` is empty.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pivot.config import DataConfig

_ANSWER_FALLBACKS = ("reward_model.ground_truth", "ground_truth")


@dataclass
class Prompt:
    id: int
    """Row index in the dataset: stable across epochs and resumes."""
    text: str
    """The prompt as text (chat messages rendered, see the module docstring)."""
    ground_truth: str
    messages: list[dict[str, str]] | None = None
    """The original chat messages, None for a plain-text prompt."""
    data_source: str = ""
    """The row's `data_source` (veRL routes a row to its scorer by it); "" when it has none."""
    extra_info: dict[str, Any] | None = None
    """The row's `extra_info` object (JSON values), None when it has none."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prompt:
        return cls(**d)


@dataclass
class DataStats:
    rows: int = 0
    valid: int = 0
    bad_json: int = 0
    missing_prompt: int = 0
    missing_answer: int = 0
    bad_type: int = 0
    bad_utf8: int = 0
    first_error: str = ""
    """The first skipped row's reason, for the log."""

    @property
    def skipped(self) -> int:
        return self.rows - self.valid


@dataclass
class PromptDataset:
    prompts: list[Prompt]
    stats: DataStats = field(default_factory=DataStats)
    source: str = ""

    def __len__(self) -> int:
        return len(self.prompts)


def _get(row: dict[str, Any], dotted: str) -> Any:
    value: Any = row
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def render_messages(messages: list[dict[str, str]]) -> str:
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def parse_row(
    row: Any, index: int, config: DataConfig, where: str = ""
) -> Prompt | tuple[str, str]:
    """A `Prompt`, or (counter name, reason) when the row must be skipped; `where` names the
    row in the reason (a JSONL file's line number; default `row {index}`)."""
    where = where or f"row {index}"
    if not isinstance(row, dict):
        return "bad_type", f"{where}: not an object"
    prompt = _get(row, config.prompt_key)
    if prompt is None:
        return "missing_prompt", (
            f"{where}: no field {config.prompt_key!r} (its fields: {_fields(row)}; "
            "--data.prompt-key NAME reads another)"
        )
    keys = [config.answer_key] + [k for k in _ANSWER_FALLBACKS if k != config.answer_key]
    answer = next((a for a in (_get(row, k) for k in keys) if a is not None), None)
    if answer is None:
        return "missing_answer", (
            f"{where}: no field {config.answer_key!r} (its fields: {_fields(row)}; "
            "--data.answer-key NAME reads another)"
        )
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return "bad_type", f"{where}: answer has type {type(answer).__name__}"
    messages = None
    if isinstance(prompt, str):
        text = prompt
    elif (
        isinstance(prompt, list)
        and prompt
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in prompt
        )
    ):
        messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
        text = render_messages(messages)
    else:
        return (
            "bad_type",
            f"{where}: prompt is neither text nor a list of {{role, content}} messages",
        )
    if not text.strip():
        return "missing_prompt", f"{where}: empty prompt"
    source = row.get("data_source")
    extra = row.get("extra_info")
    return Prompt(
        id=index,
        text=text,
        ground_truth=str(answer).strip(),
        messages=messages,
        data_source="" if source is None else str(source),
        extra_info=json.loads(json.dumps(extra, default=str)) if isinstance(extra, dict) else None,
    )


def _fields(row: dict) -> str:
    """A row's top-level field names, for a message (at most 12)."""
    names = [str(k) for k in row][:12]
    return ", ".join(names) + (", ..." if len(row) > 12 else "") if names else "none"


def rows_to_dataset(
    rows: list[Any], config: DataConfig, source: str, where: list[str] | None = None
) -> PromptDataset:
    """`where[i]` names row i in a skipped row's reason (default `row i`)."""
    stats = DataStats(rows=len(rows))
    prompts: list[Prompt] = []
    for i, row in enumerate(rows):
        label = where[i] if where else f"row {i}"
        parsed = (
            parse_row(row, i, config, label)
            if not isinstance(row, _Unreadable)
            else (row.counter, f"{label}: {row.reason}")
        )
        if isinstance(parsed, Prompt):
            prompts.append(parsed)
            continue
        counter, reason = parsed
        setattr(stats, counter, getattr(stats, counter) + 1)
        stats.first_error = stats.first_error or reason
    stats.valid = len(prompts)
    if not prompts:
        raise ValueError(
            f"{source}: no valid row among {stats.rows} (prompt_key={config.prompt_key!r}, "
            f"answer_key={config.answer_key!r}); first problem: {stats.first_error or 'the file is empty'}"
        )
    return PromptDataset(prompts, stats, source)


@dataclass(frozen=True)
class _Unreadable:
    """A line of a JSONL file that is no row: the `DataStats` counter it goes to, and why."""

    counter: str
    reason: str


def _jsonl_row(line: bytes) -> Any:
    try:
        return json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        return _Unreadable("bad_utf8", f"not UTF-8 ({e.reason} at byte {e.start})")
    except json.JSONDecodeError:
        return _Unreadable("bad_json", "not valid JSON")


def _read_rows(path: Path) -> tuple[list[Any], list[str] | None]:
    """The file's rows and, for JSONL, each row's line number (blank lines are no rows)."""
    if not path.is_file():
        raise FileNotFoundError(f"dataset {path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist(), None
        except (pa.ArrowException, OSError) as e:
            raise ValueError(
                f"dataset {path}: not a readable parquet file ({' '.join(str(e).split())})"
            ) from None
    if path.suffix in (".jsonl", ".json"):
        numbered = [
            (n, line) for n, line in enumerate(path.read_bytes().splitlines(), 1) if line.strip()
        ]
        return [_jsonl_row(line) for _, line in numbered], [f"line {n}" for n, _ in numbered]
    raise ValueError(f"dataset {path}: unknown format {path.suffix!r} (use .parquet or .jsonl)")


def load_dataset(config: DataConfig) -> PromptDataset:
    """The dataset at `config.path` (`pivot.tiny.task.training_set` falls back to the synthetic
    set where it is empty)."""
    if not config.path:
        raise ValueError("data.path: empty, no dataset to load")
    path = Path(config.path)
    rows, where = _read_rows(path)
    return rows_to_dataset(rows, config, str(path), where)


def skipped_rows_line(dataset: PromptDataset) -> str | None:
    """One line for stderr when rows were skipped: how many, of what kinds, and the first's
    place and reason (None when none was)."""
    st = dataset.stats
    if not st.skipped:
        return None
    kinds = ("bad_json", "missing_prompt", "missing_answer", "bad_type", "bad_utf8")
    counts = ", ".join(f"{k} {getattr(st, k)}" for k in kinds if getattr(st, k))
    return (
        f"pivot: data {dataset.source}: skipped {st.skipped} of {st.rows} rows ({counts}); "
        f"first: {st.first_error}"
    )


class PromptCursor:
    """Walks a dataset in a fresh seeded permutation each epoch; resumable from `state_dict`."""

    def __init__(self, dataset: PromptDataset, seed: int = 0, shuffle: bool = True) -> None:
        self.dataset = dataset
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.index = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self, n: int) -> list[Prompt]:
        """The next `n` prompts, rolling into the next epoch (reshuffled) when one runs out."""
        out: list[Prompt] = []
        while len(out) < n:
            if self.index >= len(self._order):
                self.epoch += 1
                self.index = 0
                self._order = self._permutation(self.epoch)
            out.append(self.dataset.prompts[self._order[self.index]])
            self.index += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "index": self.index,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "size": len(self.dataset),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["size"] != len(self.dataset):
            raise ValueError(
                f"cursor state is for a dataset of {state['size']} prompts, this one has {len(self.dataset)}"
            )
        self.seed, self.shuffle = int(state["seed"]), bool(state["shuffle"])
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._permutation(self.epoch)


def stats_dict(stats: DataStats) -> dict[str, Any]:
    """Metrics form of `DataStats` (with the derived `skipped`)."""
    return {**asdict(stats), "skipped": stats.skipped}
