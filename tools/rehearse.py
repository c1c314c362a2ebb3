"""Dress rehearsal of a paper preset on 4 CPU ranks, launched as a user launches it.

    python tools/rehearse.py --preset qwen2.5-1.5b+glm-z1-9b [--steps 3] [--out runs/rehearse]
                             [--kill-engine-core]

What runs is the preset's own configuration: its model families in the hub's layouts at tiny
widths with random bf16 weights (layer kinds, experts and top-k kept; `write_tiny` of
tests/model/fixtures/hub_layouts.py), each family's chat template and special tokens over a
character vocabulary, the preset's dtype, engines per role (vLLM's CPU build where the preset
picks vLLM), judge prompt file, planner and training settings. Scaled to 4 ranks: lengths and
batch shrink, and every TP is 1 (a preset's training share of 4 devices leaves no room beside it
for a TP > 1 replica; TP 2 is rehearsed by tests/engine/test_vllm_moe.py and
tests/model/test_hub_layouts_tp.py). It goes through `launch/slurm/pivot.sbatch` with stand-ins
for `srun` (running each step here) and `scontrol`, SLURM_* set as sbatch sets them, so the
preflight runs first. Where this machine cannot run what the preset picks, the rehearsal says so
and runs the nearest thing (vLLM's CPU build has no Qwen3.5: its model file needs torchvision).

It ends with the exactly-once audit, the shifts per role, the rollout/trainer mismatch of the
tokens made by the trainer's own version (bf16 on both sides), and the judge's parse rate (random
weights write no verdict: the check is that every unparsable verdict was counted and scored by
the fallback). Exit 1 when the job failed or any check did not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from configs.presets import PAPER_WORLD, get_preset  # noqa: E402
from pivot.runtime.records.audit import exactly_once  # noqa: E402
from tests.model.fixtures.hub_layouts import write_tiny  # noqa: E402
from tests.model.fixtures.hub_models import EOS_TOKENS, MODELS, TEMPLATE_SPECIALS  # noqa: E402
from tests.runtime.engine_cores import kill_an_engine_core  # noqa: E402

RANKS = 4
PROMPTS, GROUP = 4, 4  # per step: the preset's 32 x 16 scaled down
# lengths scaled down from the preset's 2K prompt / 15K response / 20K judge tokens; a character
# vocabulary makes the ~1 KB judge prompt about 1,100 tokens, so the models take 4,096 positions
SCALED = [
    "--rollout.max-prompt-tokens", "160",
    "--rollout.max-new-tokens", "24",
    "--reward.max-new-tokens", "24",
    "--rollout.engine.kv-capacity-tokens", "16384",
    "--reward.engine.kv-capacity-tokens", "32768",
    "--rollout.engine.max-prefill-tokens", "4096",
    "--reward.engine.max-prefill-tokens", "4096",
    "--train.batch-prompts", str(PROMPTS),
    "--train.group-size", str(GROUP),
    "--train.micro-batch-tokens", "4096",
    "--planner.horizon-s", "10",
    "--eval.every", "0",
    # random weights never write a verdict: a retry of each would only double the judge's work
    "--reward.no-retry-unparsable",
    "--rollout.tp", "1",
    "--reward.tp", "1",
    "--cluster.device", "cpu",
    "--log.no-progress",
    "--log.no-tensorboard",
]  # fmt: skip
MAX_POSITIONS = 4096
# rollout/trainer mismatch of current tokens (bf16 engine vs bf16 trainer): the tiny task's bf16
# run measured a mean of 0.00165 and a step's largest mean 0.145 (docs/results.md, 2026-12-05)
MISMATCH_BOUND = 0.3
# characters of the vocabulary: printable ASCII and the newline (others map to the pad token)
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
THINK = ["<think>", "</think>"]


@dataclass(frozen=True)
class Rehearsal:
    preset: str
    policy: Path
    genrm: Path
    python: Path  # the interpreter of torchrun and of the preflight
    notes: list[str]  # where this machine runs something other than what the preset picks
    overrides: list[str]  # the flags that make it do so


def family_of(hub_name: str) -> str:
    return MODELS[hub_name]["config"]["model_type"]


def write_char_tokenizer(folder: Path, family: str) -> dict[str, int]:
    """A character-level tokenizer.json whose special tokens are the family's (eos, the chat
    template's, the thinking block's), each one token; returns the vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = list(
        dict.fromkeys(
            ["<|pad|>", "<|endoftext|>", EOS_TOKENS[family], *TEMPLATE_SPECIALS[family], *THINK]
        )
    )
    vocab = {t: i for i, t in enumerate([*specials, *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|pad|>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(specials)
    tok.save(str(folder / "tokenizer.json"))
    return vocab


def write_model(hub_name: str, folder: Path, seed: int, head_dim: int | None) -> Path:
    """`hub_name`'s layout at tiny widths, with a tokenizer of its family's special tokens and
    its chat template (tokenizer_config.json as write_tiny writes it); `head_dim`: the head size
    a CPU build needs (None: the layout's own)."""
    family = family_of(hub_name)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_char_tokenizer(folder, family)
    eos = EOS_TOKENS[family]
    # GLM-4 ends on any of three tokens, as its hub config lists them
    eos_ids = (
        [vocab[t] for t in ("<|endoftext|>", "<|user|>", "<|observation|>")]
        if family == "glm4"
        else vocab[eos]
    )
    text = {
        "vocab_size": 128,
        "eos_token_id": eos_ids,
        "pad_token_id": vocab["<|pad|>"],
        "max_position_embeddings": MAX_POSITIONS,
    }
    if head_dim is not None:
        text["head_dim"] = head_dim
    tokenizer = (folder / "tokenizer.json").read_bytes()
    write_tiny(hub_name, folder, seed=seed, shards=2, text=text)
    (folder / "tokenizer.json").write_bytes(tokenizer)
    return folder


def vllm_venv_python() -> Path:
    """vLLM's CPU venv's interpreter, built first if need be."""
    from tools.vllm_venv import vllm_python

    return vllm_python()


@dataclass(frozen=True)
class CpuBuild:
    """A backend's CPU build that runs apart from this interpreter, with its limits here."""

    python: Callable[[], Path]
    """its venv's interpreter (built first if need be), which then runs the whole job"""
    head_dim: int
    """the head size the tiny models get: its CPU attention's smallest"""
    cannot_load: dict[str, str]
    """model family -> why it cannot load that family here"""


# The backends a preset may pick that this machine runs through their own CPU build (the rest
# run in this interpreter): vLLM's, in its venv (tools/vllm_venv.py).
CPU_BUILDS = {
    "vllm": CpuBuild(
        python=vllm_venv_python,
        head_dim=32,  # vLLM's CPU attention takes head sizes of 32 and up
        cannot_load={
            "qwen3_5_moe": "the preset serves Qwen3.5 on vLLM; vLLM's CPU build cannot load it "
            "here (its qwen3_5.py imports torchvision, which has no CPU wheel for this torch)"
        },
    )
}
FALLBACK = "embedded"
"""the backend that serves what a CPU build cannot load"""


def prepare(preset: str, out: Path) -> Rehearsal:
    cfg = get_preset(preset)
    notes = []
    backend = cfg.reward.engine.backend
    genrm_name = Path(cfg.model.genrm).name
    why = (
        CPU_BUILDS[backend].cannot_load.get(family_of(genrm_name))
        if backend in CPU_BUILDS
        else None
    )
    if why:
        notes.append(f"reward: {why}: the {FALLBACK} engine serves it instead")
        backend = FALLBACK
    build = CPU_BUILDS.get(backend) or CPU_BUILDS.get(cfg.rollout.engine.backend)
    python = build.python() if build else Path(sys.executable)
    head_dim = build.head_dim if build else None
    models = out / "models"
    policy = write_model(Path(cfg.model.policy).name, models / "policy", 1, head_dim)
    genrm = write_model(genrm_name, models / "genrm", 2, head_dim)
    overrides = ["--reward.engine.backend", backend] if backend != cfg.reward.engine.backend else []
    return Rehearsal(preset, policy, genrm, python, notes, overrides)


def stand_ins(folder: Path) -> str:
    """`srun` running its step here (srun's own options dropped), `scontrol` naming this host;
    the PATH that finds them first."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "srun").write_text(
        "#!/usr/bin/env bash\n"
        "# one node: run the step here, without srun's own options\n"
        'while [[ $# -gt 0 && "$1" != */python* && "$1" != python* ]]; do shift; done\n'
        'exec "$@"\n'
    )
    (folder / "scontrol").write_text("#!/usr/bin/env bash\necho localhost\n")
    for f in ("srun", "scontrol"):
        (folder / f).chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


def flags(r: Rehearsal, run: Path, steps: int) -> list[str]:
    return [
        "--preset", r.preset, "--model.policy", str(r.policy), "--model.genrm", str(r.genrm),
        "--log.dir", str(run), "--train.steps", str(steps), *SCALED,
        *r.overrides,
    ]  # fmt: skip


def launch(r: Rehearsal, out: Path, steps: int, log: Path, kill: bool) -> tuple[int, float]:
    """The sbatch template on one 'node' of RANKS CPU ranks; (exit code, seconds). `kill`: once
    a judge serves, SIGKILL one vLLM engine-core process (tests/runtime/engine_cores.py)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PIVOT_", "TORCHRUN"))
    }
    env.update(
        PATH=stand_ins(out / "bin"),
        SLURM_JOB_ID=str(os.getpid()),
        SLURM_JOB_NODELIST="localhost",
        SLURM_NNODES="1",
        SLURM_GPUS_ON_NODE=str(RANKS),
        SLURM_SUBMIT_DIR=str(ROOT),
        PIVOT_MAX_RESTARTS="0",
        PIVOT_RDZV_PORT=str(29500 + os.getpid() % 1000),
        TORCHRUN=f"{r.python} -m torch.distributed.run",
        PYTHON=str(r.python),
        PYTHONPATH=str(ROOT),
        HOME=str(out / "home"),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    cmd = ["bash", str(ROOT / "launch" / "slurm" / "pivot.sbatch"), *flags(r, out / "run", steps)]
    started = time.monotonic()
    with log.open("w") as f:
        job = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=out)
        if kill:  # as soon as a judge serves: the steps come fast once judging has begun
            pid = kill_an_engine_core(job, out / "run", "reward")
            print(f"rehearse: vLLM engine core {pid} SIGKILLed once a judge served", flush=True)
        rc = job.wait()
    return rc, time.monotonic() - started


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check(preset: str, run: Path, steps: int, killed: bool) -> tuple[list[str], list[str]]:
    """(report lines, problems) of a finished rehearsal's records; `killed`: an engine core was
    killed, so its replica must have failed and come back without a restart."""
    lines, problems = [], []
    acc = exactly_once(run, steps, PROMPTS, GROUP)
    lines.append(f"exactly once: {len(acc.violations)} violations")
    problems += acc.violations[:5]
    shifts = [e for e in rows(run / "timeline.jsonl") if e.get("kind") == "shift"]
    per_role: dict[str, list[int]] = {}
    for e in shifts:
        if e["event"] in ("shift_up", "shift_down"):
            per_role.setdefault(e["role"], [0, 0])[e["event"] == "shift_down"] += 1
    lines.append(
        "shifts (up/down): "
        + ", ".join(f"{role} +{u}/-{d}" for role, (u, d) in sorted(per_role.items()))
    )
    if not any(u for role, (u, _) in per_role.items() if role != "train"):
        problems.append("no inference replica shifted up")
    if killed:
        failed = [(e["role"], e["slot"]) for e in shifts if e["event"] == "engine_failed"]
        took = [e["recover_s"] for e in shifts if e["event"] == "engine_rebuilt"]
        lines.append(
            f"engine failures: {failed}, rebuilt {len(took)}, "
            f"serving again after {', '.join(f'{t:.1f}' for t in took) or '-'} s"
        )
        if not failed or len(took) < len(failed):
            problems.append("the killed engine's replica was not rebuilt")
    metrics = rows(run / "metrics.jsonl")
    current = [  # the steps that trained tokens of the trainer's own version
        m["train/mismatch_current/abs_mean"]
        for m in metrics
        if m.get("train/mismatch_current/token_share", 0) > 0
    ]
    if current:
        lines.append(
            f"mismatch of current tokens (|log p_rollout - log p_trainer|, bf16): mean "
            f"{sum(current) / len(current):.5f}, largest step {max(current):.5f} (bound {MISMATCH_BOUND})"
        )
        if max(current) > MISMATCH_BOUND:
            problems.append(f"rollout/trainer mismatch {max(current):.4f} over {MISMATCH_BOUND}")
    else:
        problems.append("no step measured the rollout/trainer mismatch")
    # counted as the flow judges (cumulative, surplus groups included); random weights write
    # no verdict, so every trained sample's reward must be its verifiable part plus the fallback
    unparsable = max((m.get("count/unparsable_verdicts", 0) for m in metrics), default=0)
    reward = get_preset(preset).reward
    samples = rows(run / "samples.jsonl")
    off = [
        s
        for s in samples
        if abs(
            s["reward"]
            - reward.w_verifiable * s["verifiable"]
            - reward.w_genrm * reward.fallback_score
        )
        > 1e-6
    ]
    parsed = len(samples) - len(off)
    lines.append(
        f"judge: {unparsable} verdicts unparsable and counted (random weights write no `Score:` "
        f"line); {parsed} of {len(samples)} trained samples scored by the fallback "
        f"({reward.fallback_score})"
    )
    if not unparsable or off:
        problems.append(
            f"judge: {len(off)} samples not scored by the fallback, {unparsable} counted"
        )
    return lines, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--preset", required=True, choices=sorted(PAPER_WORLD))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "rehearse")
    ap.add_argument(
        "--kill-engine-core",
        action="store_true",
        help="once a judge serves, SIGKILL one vLLM engine-core process (a judge's where "
        "only the judge is on vLLM): the job must rebuild it in place, without a restart",
    )
    a = ap.parse_args(argv)
    out = a.out / a.preset
    if out.exists():
        import shutil

        shutil.rmtree(out)
    out.mkdir(parents=True)
    r = prepare(a.preset, out)
    for note in r.notes:
        print(f"rehearse: {note}", flush=True)
    print(
        f"rehearse: {a.preset} on {RANKS} CPU ranks through launch/slurm/pivot.sbatch ({out / 'job.out'})",
        flush=True,
    )
    rc, seconds = launch(r, out, a.steps, out / "job.out", a.kill_engine_core)
    print(f"rehearse: the job ended with exit code {rc} after {seconds:.0f} s")
    if rc != 0:
        print((out / "job.out").read_text()[-3000:])
        return 1
    lines, problems = check(a.preset, out / "run", a.steps, a.kill_engine_core)
    for line in lines:
        print(f"  {line}")
    for problem in problems:
        print(f"rehearse: WRONG: {problem}")
    print(f"rehearse: {a.preset}: {'clean' if not problems else 'FAILED'}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
