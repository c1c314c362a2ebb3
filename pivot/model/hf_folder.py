"""Hugging Face checkpoint layout: config.json, safetensors (single or sharded + index), tokenizer.json."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from pivot.model.args import ModelArgs
from pivot.model.meta_init import params_on_meta
from pivot.model.names import SKIPPED_PREFIXES as _SKIPPED_PREFIXES
from pivot.model.names import decoder_name
from pivot.model.transformer import CausalLM

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

log = logging.getLogger(__name__)
_told: set[Path] = set()  # folders whose skipped tensors were already named in the log


def text_config(path: str | Path) -> dict:
    """A folder's config.json as a dict; a vision-language folder's `text_config` (its decoder)."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    return cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg


def _note_skipped(path: Path, names: list[str]) -> None:
    """Name the skipped parts (vision tower, MTP head) once per folder: skipping is on purpose."""
    skipped = [n for n in names if n.startswith(_SKIPPED_PREFIXES)]
    if skipped and path.resolve() not in _told:
        _told.add(path.resolve())
        counts = {p: sum(n.startswith(p) for n in skipped) for p in _SKIPPED_PREFIXES}
        parts = ", ".join(f"{p}* ({c} tensors)" for p, c in counts.items() if c)
        log.info("%s: not loading %s: the decoder Pivot serves does not use them", path, parts)


def _weight_files(path: Path) -> dict[str, list[str]]:
    """file name -> tensor names it should hold, from the index or the single file."""
    index = path / INDEX
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        _note_skipped(path, list(weight_map))
        files: dict[str, list[str]] = {}
        for name, file in weight_map.items():
            files.setdefault(file, []).append(name)
        return files
    if (path / SINGLE).is_file():
        return {SINGLE: []}
    raise FileNotFoundError(f"{path}: no {SINGLE} and no {INDEX}")


def load_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a HF checkpoint folder; a missing or truncated file names itself."""
    path = Path(path)
    tensors: dict[str, torch.Tensor] = {}
    for file, expected in _weight_files(path).items():
        full = path / file
        if not full.is_file():
            raise FileNotFoundError(f"{full}: listed in {INDEX} but missing")
        try:
            with safe_open(str(full), framework="pt") as f:
                names = list(f.keys())
                _note_skipped(path, names)
                for name in names:
                    if (ours := decoder_name(name)) is not None:
                        tensors[ours] = f.get_tensor(name)
        except Exception as e:  # safetensors raises its own error types for truncated headers/data
            raise ValueError(
                f"{full}: unreadable safetensors file (truncated or corrupt): {e}"
            ) from e
        missing = sorted(set(expected) - set(names))
        if missing:
            raise ValueError(f"{full}: tensor {missing[0]!r} listed in {INDEX} is not in the file")
    return tensors


# safetensors' dtype codes (its file header) and the torch dtypes they hold
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def checkpoint_names(path: str | Path) -> dict[str, str]:
    """Pivot's name -> the checkpoint's own name, for every tensor the decoder uses (they differ in
    vision-language folders, whose language model is under `model.language_model.`), from the
    index or the headers alone. What a loader that reads the hub's names (vLLM) must be given."""
    path = Path(path)
    files = _weight_files(path)
    names = [n for listed in files.values() for n in listed]
    if not names:  # a single file without an index: its header lists the names
        with safe_open(str(path / SINGLE), framework="pt") as f:
            names = list(f.keys())
    return {ours: name for name in names if (ours := decoder_name(name)) is not None}


def tensor_headers(path: str | Path) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Name -> (shape, dtype) of every tensor, from the safetensors headers alone (no data read)."""
    path = Path(path)
    out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for file in _weight_files(path):
        full = path / file
        if not full.is_file():
            raise FileNotFoundError(f"{full}: listed in {INDEX} but missing")
        try:
            with safe_open(str(full), framework="pt") as f:
                _note_skipped(path, list(f.keys()))
                for name in f.keys():
                    if (ours := decoder_name(name)) is not None:
                        sliced = f.get_slice(name)
                        out[ours] = (
                            tuple(sliced.get_shape()),
                            SAFETENSORS_DTYPES[sliced.get_dtype()],
                        )
        except KeyError as e:
            raise ValueError(f"{full}: unsupported tensor dtype {e.args[0]!r}") from e
        except Exception as e:
            raise ValueError(f"{full}: unreadable safetensors header: {e}") from e
    return out


def _check_tensors(path: Path, args: ModelArgs, got: dict[str, tuple[int, ...]]) -> None:
    """Every tensor the model of `args` needs is in `got` with its shape, and nothing else is."""
    with params_on_meta():  # not torch.device("meta"): see meta_normal_skipped
        expected = CausalLM(args).state_dict()
    for name, param in expected.items():
        if name == "lm_head.weight" and args.tie_word_embeddings:
            continue
        if name not in got:
            raise ValueError(f"{path}: tensor {name!r} missing from the checkpoint")
        if tuple(got[name]) != tuple(param.shape):
            raise ValueError(
                f"{path}: tensor {name!r} has shape {tuple(got[name])}, config.json implies {tuple(param.shape)}"
            )
    unexpected = sorted(set(got) - set(expected))
    if unexpected:
        raise ValueError(
            f"{path}: unexpected tensor {unexpected[0]!r} (and {len(unexpected) - 1} more)"
        )


def check_folder(path: str | Path) -> None:
    """config.json against the safetensors headers, reading no tensor data: a missing shard, a
    tensor missing, extra or of the wrong shape raises one line naming the file or tensor."""
    path = Path(path)
    _check_tensors(
        path, ModelArgs.load(path), {n: shape for n, (shape, _) in tensor_headers(path).items()}
    )


def from_pretrained(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    linear: str = "torch",
) -> CausalLM:
    """Build the model described by `path/config.json` and load its safetensors weights."""
    path = Path(path)
    args = ModelArgs.load(path)
    state = load_state_dict(path)
    _check_tensors(path, args, {n: tuple(t.shape) for n, t in state.items()})
    with torch.device(device):
        model = CausalLM(args, linear=linear)
    model.load_state_dict(state, strict=False)
    return model.to(dtype=dtype)


SIDE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
"""What a hub folder ships beside its weights and config.json that its users load with it: the
tokenizer in either of the layouts transformers reads, its chat template (inside
tokenizer_config.json, or the newer separate file) and the generation defaults."""


def copy_side_files(source: str | Path, dest: str | Path) -> list[Path]:
    """Copy `SIDE_FILES` that `source` has into `dest` (an exported policy stays a complete
    folder: a trained Qwen keeps its chat template and stop tokens); returns the copies."""
    copied = []
    for name in SIDE_FILES:
        src = Path(source) / name
        if src.is_file():
            target = Path(dest) / name
            target.write_bytes(src.read_bytes())
            copied.append(target)
    return copied


def save_pretrained(
    model: CausalLM,
    path: str | Path,
    tokenizer_file: str | Path | None = None,
    max_shard_bytes: int = 2 << 30,
) -> None:
    """Write `model` in HF layout; shards plus an index when it exceeds `max_shard_bytes`."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.args.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    dtype = str(next(iter(state.values())).dtype).removeprefix("torch.")
    (path / "config.json").write_text(json.dumps(model.args.to_hf(dtype), indent=2))
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    for stale in list(path.glob("model*.safetensors")) + [path / INDEX]:
        stale.unlink(missing_ok=True)
    if len(shards) == 1:
        save_file(shards[0], str(path / SINGLE), metadata={"format": "pt"})
    else:
        weight_map = {}
        for k, shard in enumerate(shards, start=1):
            file = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, str(path / file), metadata={"format": "pt"})
            weight_map.update({name: file for name in shard})
        total = sum(t.numel() * t.element_size() for t in state.values())
        (path / INDEX).write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
        )
    if tokenizer_file is not None:
        (path / "tokenizer.json").write_bytes(Path(tokenizer_file).read_bytes())
