"""`pivot/main.py --dry-run`: print the memory plan of a configuration and say what does not fit.

Runs without torchrun and without a GPU. The cluster is `--cluster.nnodes` hosts of
`--cluster.devices-per-node` devices; what the flags leave out is read or assumed as
`pivot/memory/fit.py` says (a paper preset: the fewest nodes it fits on, of the paper's H20
devices unless this machine has a GPU; the tiny preset: one host holding the role pools).
Model folders that exist are read (config.json and safetensors headers); absent ones are
estimated from `--model.policy-params-b` / `--model.genrm-params-b`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pivot.config import ConfigError, PivotConfig
from pivot.memory.fit import MOST_NODES, device_memory_gb, fewest_nodes, pools, resolve_node
from pivot.memory.footprint import ModelFootprint, from_folder, from_params
from pivot.memory.plan import GB, MemoryPlan, Usage, plan_memory
from pivot.model.context import ContextNeed, context_needs


def dry_run_shape(cfg: PivotConfig) -> tuple[int, int]:
    """(nnodes, devices_per_node) the dry run checks the config against: the flags', else (a
    paper preset) the node it was sized for, else one host holding the role pools; without
    --cluster.nnodes, the fewest nodes whose shape is valid (`dry_run` then adds nodes until the
    memory fits)."""
    cfg, _ = resolve_node(cfg, read_memory=lambda: None)
    c = cfg.cluster
    per_node = c.devices_per_node or max(1, -(-pools(cfg) // (c.nnodes or 1)))
    if c.nnodes:
        return c.nnodes, per_node
    return fewest_nodes(cfg, per_node, lambda _cfg, _n: True) or 1, per_node


def _tiny_folder(cfg: PivotConfig, which: str) -> Path:
    from pivot.tiny.shipped import WEIGHTS

    if not (WEIGHTS / which / "config.json").is_file():
        raise ConfigError(
            f"model.{which}='': the embedded tiny model is missing from {WEIGHTS} "
            f"(restore it from git), or give --model.{which} or --model.{which}-params-b"
        )
    return WEIGHTS / which


def footprint(cfg: PivotConfig, which: str) -> ModelFootprint:
    """The policy's or the GenRM's footprint: its folder when present, else the preset's size."""
    m = cfg.model
    path = getattr(m, which)
    params_b = m.policy_params_b if which == "policy" else m.genrm_params_b
    active_b = 0.0 if which == "policy" else m.genrm_active_params_b
    if path and (Path(path) / "config.json").is_file():
        return from_folder(path, m.dtype)
    if params_b > 0:
        return from_params(path, params_b, active_b, m.dtype)
    if path:
        raise ConfigError(
            f"model.{which}={path!r}: no config.json there and model.{which}_params_b is 0"
        )
    return from_folder(_tiny_folder(cfg, which), m.dtype)


def _gb(n: int) -> str:
    return f"{n / GB:9.2f} GB"


def _usage_lines(u: Usage) -> list[str]:
    cap = (
        f"of {u.capacity / GB:.2f} GB"
        if u.capacity
        else f"(capacity unknown: set --{u.field.replace('_', '-')})"
    )
    status = "" if not u.capacity else ("  DOES NOT FIT" if u.over else "  fits")
    lines = [f"  {u.where}"]
    lines += [f"    {i.what:<44}{_gb(i.nbytes)}" for i in u.items]
    lines.append(f"    {'total':<44}{_gb(u.total)} {cap}{status}")
    return lines


def format_plan(
    cfg: PivotConfig, plan: MemoryPlan, models: list[ModelFootprint], nnodes: int, dpn: int
) -> str:
    lines = [
        f"pivot: memory plan of preset {cfg.preset}, mode {cfg.cluster.mode}, "
        f"{nnodes} hosts x {dpn} devices, dtype {cfg.model.dtype}"
    ]
    for fp in models:
        lines.append(
            f"  model {fp.name}: {fp.params / 1e9:.2f}B parameters, {fp.nbytes / GB:.2f} GB ({fp.source})"
        )
    lines.append("per device")
    for u in plan.devices:
        lines += _usage_lines(u)
    lines.append("per host")
    for u in plan.hosts:
        lines += _usage_lines(u)
    lines.append(f"    {'pinned':<44}{_gb(plan.host_pinned)}")
    return "\n".join(lines)


def _max_positions(path: str) -> int | None:
    """max_position_embeddings from a folder's config.json (a VL folder's text_config), or None."""
    import json

    file = Path(path) / "config.json" if path else None
    if file is None or not file.is_file():
        return None
    cfg = json.loads(file.read_text())
    return cfg.get("text_config", cfg).get("max_position_embeddings")


def _judge_overhead(cfg: PivotConfig) -> tuple[int, str]:
    """The judge template's tokens: measured with the GenRM's tokenizer when its folder has one,
    else bounded by the template's UTF-8 bytes (a byte-level BPE token covers at least one byte;
    the chat template's own tokens are then not counted)."""
    from pivot.rl.reward import judge_prompt
    from pivot.tiny.task import judge_template

    genrm = Path(cfg.model.genrm) if cfg.model.genrm else None
    if genrm is not None and (genrm / "tokenizer.json").is_file():
        from pivot.memory.context_check import judge_overhead

        return judge_overhead(cfg, genrm), "measured with the GenRM's tokenizer"
    return len(
        judge_prompt("", "", judge_template(cfg.reward)).encode()
    ), "bounded by the template's bytes"


def context_lines(cfg: PivotConfig) -> tuple[list[str], list[str]]:
    """Lines of the context check and one line per role that overruns its model's limit."""
    limits = {w: _max_positions(getattr(cfg.model, w)) for w in ("policy", "genrm")}
    policy_limit, genrm_limit = limits["policy"], limits["genrm"]
    if policy_limit is None or genrm_limit is None:
        missing = [w for w, v in limits.items() if v is None]
        return [f"context: not checked for {', '.join(missing)} (no config.json)"], []
    overhead, how = _judge_overhead(cfg)
    response, flag = cfg.longest_response()
    needs: tuple[ContextNeed, ...] = context_needs(
        Path(cfg.model.policy).name,
        policy_limit,
        Path(cfg.model.genrm).name,
        genrm_limit,
        cfg.rollout.max_prompt_tokens,
        response,
        cfg.reward.max_new_tokens,
        overhead,
        flag,
    )
    lines = [f"context (judge template {how})"]
    lines += [
        f"  {n.role:<8} {n.prompt:>7} prompt + {n.new_tokens:>6} new = {n.total:>7} of {n.limit} ({n.model})"
        f"{'  DOES NOT FIT' if n.problem else '  fits'}"
        for n in needs
    ]
    return lines, [n.problem for n in needs if n.problem]


def dry_run(
    cfg: PivotConfig,
    out: TextIO | None = None,
    read_memory: Callable[[], float | None] = device_memory_gb,
) -> int:
    """Print the plan; 0 when everything fits, 2 (and one line per problem on stderr) otherwise.
    Without --cluster.nnodes the plan is the one of the fewest nodes it fits on; with it, a plan
    that does not fit also names the fewest nodes that would do."""
    cfg, notes = resolve_node(cfg, read_memory)
    nnodes, dpn = dry_run_shape(cfg)
    try:
        policy, genrm = footprint(cfg, "policy"), footprint(cfg, "genrm")
    except (ConfigError, OSError, ValueError, KeyError) as e:
        print(f"pivot: config error: {e}", file=sys.stderr)
        return 2
    fewest = fewest_nodes(
        cfg, dpn, lambda fitted, n: not plan_memory(fitted, policy, genrm, n, dpn).problems
    )
    if not cfg.cluster.nnodes and fewest is not None:
        nnodes = fewest
    fitted = cfg.fit_world(nnodes * dpn)
    plan = plan_memory(fitted, policy, genrm, nnodes, dpn)
    try:
        ctx_lines, ctx_problems = context_lines(cfg)
    except (ConfigError, OSError, ValueError) as e:
        print(f"pivot: config error: {e}", file=sys.stderr)
        return 2
    memory = f"{cfg.cluster.gpu_memory_gb:g} GB" if cfg.cluster.gpu_memory_gb else "unknown memory"
    where = f"{dpn} devices of {memory}"
    fewest_line = (
        f"fewest nodes it fits on: {fewest} of {where}"
        if fewest is not None
        else f"fits on no count of nodes of {where} up to {MOST_NODES}"
    )
    print(
        format_plan(fitted, plan, [policy, genrm], nnodes, dpn)
        + "\n"
        + "\n".join([*ctx_lines, *notes, fewest_line]),
        file=out or sys.stdout,
    )
    room = fitted.room_problem(nnodes * dpn)
    problems = [*plan.problems, *([room] if room else [])]
    for problem in problems:
        print(f"pivot: does not fit: {problem}", file=sys.stderr)
    for problem in ctx_problems:
        print(f"pivot: context too long: {problem}", file=sys.stderr)
    if problems and fewest is not None and fewest != nnodes:
        print(
            f"pivot: fits on {fewest} nodes of {where} (sbatch --nodes {fewest}, or "
            f"--cluster.nnodes {fewest} here)",
            file=sys.stderr,
        )
    return 2 if problems or ctx_problems else 0
