"""The memory plan's arithmetic against hand-computed values (formulas: pivot/memory/plan.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

from configs.presets import get_preset
from pivot.config import (
    ClusterConfig,
    EngineConfig,
    ModelConfig,
    PivotConfig,
    RewardConfig,
    RolloutConfig,
    TrainConfig,
)
from pivot.memory.footprint import from_folder, from_params
from pivot.memory.plan import plan_memory

# vocab 64, hidden 32, intermediate 64, 2 layers, 4 heads of 8, 2 KV heads, untied
PARAMS = 22816  # embed 2048 + 2 * (q 1056 + k 528 + v 528 + o 1024 + mlp 6144 + norms 64) + norm 32 + head 2048
LAYER = 9344
UNSPLIT = 160  # the norms: 2 * 2 * 32 + 32


def test_footprint_from_folder(qwen2_folder: Path) -> None:
    hf = transformers.AutoModelForCausalLM.from_pretrained(qwen2_folder)
    assert hf.num_parameters() == PARAMS  # the hand count agrees with transformers
    fp = from_folder(qwen2_folder, "bfloat16")
    assert (fp.params, fp.nbytes, fp.layer_params()) == (PARAMS, 2 * PARAMS, LAYER)
    assert (fp.layers, fp.kv_layers, fp.kv_heads, fp.head_dim, fp.hidden, fp.vocab) == (
        2,
        2,
        2,
        8,
        32,
        64,
    )
    assert fp.tp_bytes(2) == 2 * ((PARAMS - UNSPLIT) // 2 + UNSPLIT)


def _cfg(**cluster: object) -> PivotConfig:
    cfg = get_preset("tiny-cpu")
    engine = EngineConfig(kv_capacity_tokens=128, max_prefill_tokens=64, max_running_seqs=4)
    return cfg.replace(
        model=ModelConfig(dtype="bfloat16"),
        rollout=RolloutConfig(tp=2, engine=engine),
        reward=RewardConfig(tp=1, engine=engine),
        train=TrainConfig(devices=2, micro_batch_tokens=100),
        cluster=ClusterConfig(device="cuda", **cluster),
    )


def test_device_lines(qwen2_folder: Path) -> None:
    fp = from_folder(qwen2_folder, "bfloat16")
    plan = plan_memory(_cfg(gpu_memory_gb=1.0), fp, fp, nnodes=1, devices_per_node=4)
    rollout, reward, train = ({i.what: i.nbytes for i in u.items} for u in plan.devices)
    assert rollout == {
        "weights": 22976,
        "KV cache": 128 * 2 * 2 * 1 * 8 * 2,
        "activations": 64 * (4 * 32 + 3 * 32) * 2 + 4 * 64 * 4,
        # 4 sequences x 64 vocab fp32, twice; flex (a GPU's default): 4 rows of block tables
        # over 128 / 64 blocks + 2, int32
        "decode graphs": 4 * 64 * 4 * 2 + 4 * (128 // 64 + 2) * 4,
    }
    assert reward["KV cache"] == 128 * 2 * 2 * 2 * 8 * 2 and reward["weights"] == 2 * PARAMS
    assert train == {
        "master weights fp32": 4 * 11408,
        "gradients fp32": 4 * 11408,
        "optimizer fp32": 8 * 11408,
        "FSDP all-gather": 2 * LAYER * 2,
        # packed real tokens: the budget (100) or the rollout's longest sample (160), which
        # trains alone; logits of one chunk (at most those tokens) in bf16 and its fp32 buffer
        "activations": 160 * 2 * (8 * 32 + 4 * 64) * 2,
        "LM-head chunk": 160 * 64 * (4 + 2),
    }
    assert plan.problems == ()
    host = {i.what: i.nbytes for i in plan.hosts[0].items}
    assert host == {
        "GPS buffers (replicated, 2 per model)": 2 * 2 * 2 * PARAMS,
        "trainer offload (2 devices)": 2 * 12 * 11408,
    }
    assert plan.host_pinned == 2 * 2 * 2 * PARAMS + 2 * 12 * 11408  # CUDA: GPS pinned too


def test_the_gather_references_graphs_gather_the_roles_longest_sequence(
    qwen2_folder: Path,
) -> None:
    """The gather reference's largest graph gathers K/V as wide as the role's longest sequence
    (`engine.max_seq_len`), not the KV capacity: 4 x 100 tokens x (K and V of 1 KV head of 8 +
    the scores of 2 query heads) in bf16."""
    fp = from_folder(qwen2_folder, "bfloat16")
    cfg = _cfg(gpu_memory_gb=1.0)
    engine = EngineConfig(
        kv_capacity_tokens=128, max_prefill_tokens=64, max_running_seqs=4, attention="gather",
        max_seq_len=100,
    )  # fmt: skip
    cfg = cfg.replace(rollout=RolloutConfig(tp=2, engine=engine))
    rollout = {i.what: i.nbytes for i in plan_memory(cfg, fp, fp, 1, 4).devices[0].items}
    assert rollout["decode graphs"] == 4 * 64 * 4 * 2 + 4 * 100 * (2 * 1 * 8 + 2) * 2


def test_training_activations_with_recompute(qwen2_folder: Path) -> None:
    """Layer inputs 160 x 2 x 32 x 2 B, one layer's saved tensors 160 x (8 x 32 + 4 x 64) x 2 B
    (160: the longest sample, over the budget of 100)."""
    fp = from_folder(qwen2_folder, "bfloat16")
    cfg = _cfg(gpu_memory_gb=1.0)
    cfg = cfg.replace(
        train=TrainConfig(devices=2, micro_batch_tokens=100, activation_checkpointing=True)
    )
    train = {
        i.what: i.nbytes
        for i in plan_memory(cfg, fp, fp, nnodes=1, devices_per_node=4).devices[-1].items
    }
    assert train["activations"] == 160 * 2 * 32 * 2 + 160 * (8 * 32 + 4 * 64) * 2
    assert train["master weights fp32"] == 4 * 11408  # only the activations change


def test_kl_reference_is_one_more_fp32_shard_parked_with_the_trainer(qwen2_folder: Path) -> None:
    fp = from_folder(qwen2_folder, "bfloat16")
    plans = {}
    for kl in (0.0, 0.001):
        cfg = _cfg(gpu_memory_gb=1.0)
        cfg = cfg.replace(train=TrainConfig(devices=2, micro_batch_tokens=100, kl_coef=kl))
        plans[kl] = plan_memory(cfg, fp, fp, nnodes=1, devices_per_node=4)
    items = {i.what: i.nbytes for i in plans[0.001].devices[-1].items}
    assert "KL reference fp32" not in {i.what for i in plans[0.0].devices[-1].items}
    assert items["KL reference fp32"] == items["master weights fp32"] == 4 * 11408
    assert plans[0.001].host_pinned - plans[0.0].host_pinned == 2 * 4 * 11408  # two trainers


def test_device_overflow_names_role_and_amount(qwen2_folder: Path) -> None:
    fp = from_folder(qwen2_folder, "bfloat16")
    plan = plan_memory(_cfg(gpu_memory_gb=250e-6), fp, fp, nnodes=1, devices_per_node=4)
    [problem] = plan.problems  # only training (256000 B of activations alone) exceeds 250 kB
    total = 16 * 11408 + 4 * LAYER + 256000
    assert (
        problem.startswith("train device (FSDP over 2")
        and "cluster.gpu_memory_gb=0.00025" in problem
    )
    assert (
        f"short by {(total - 250000) / 1e9:.2f} GB" in problem and "largest: activations" in problem
    )


@pytest.mark.parametrize(
    "host_gb, k, fits", [(0, 1, True), (13, 1, True), (11.9, 2, True), (5, 4, True), (2, 4, False)]
)
def test_gps_group_size(host_gb: float, k: int, fits: bool) -> None:
    """Policy 1B + GenRM 2B in bf16, 2 buffers: 12 GB per host replicated, 12/k grouped."""
    cfg = _cfg(host_memory_gb=host_gb).replace(train=TrainConfig(devices=0))
    plan = plan_memory(
        cfg, from_params("", 1.0, 0.0, "bfloat16"), from_params("", 2.0, 0.0, "bfloat16"), 4, 1
    )
    assert plan.gps_group == k
    assert plan.hosts[0].items[0].nbytes == 12_000_000_000 // k
    assert (plan.problems == ()) == fits
    if not fits:
        assert "cluster.host_memory_gb=2 is short by 1.00 GB" in plan.problems[0]


def test_a_production_engine_stages_the_whole_model_on_host_per_leader() -> None:
    """vLLM keeps a replica's whole model in a /dev/shm file on its leader's host (sglang reads it
    whole there): a host of 8 devices holds 8 // tp such leaders. GenRM 2B bf16 at TP 2 -> 4 x 4 GB."""
    policy, genrm = from_params("", 1.0, 0.0, "bfloat16"), from_params("", 2.0, 0.0, "bfloat16")
    cfg = _cfg().replace(train=TrainConfig(devices=0))
    embedded = plan_memory(cfg, policy, genrm, 1, 8)
    vllm = EngineConfig(backend="vllm", kv_capacity_tokens=128)
    cfg = cfg.replace(reward=RewardConfig(tp=2, engine=vllm))
    host = {i.what: i.nbytes for i in plan_memory(cfg, policy, genrm, 1, 8).hosts[0].items}
    assert host["vllm staging (4 reward leaders)"] == 4 * 4_000_000_000
    assert len(host) == len(embedded.hosts[0].items) + 1
    assert plan_memory(cfg, policy, genrm, 1, 8).host_pinned == embedded.host_pinned


def test_decode_graphs_are_counted_only_where_the_engine_captures_them(qwen2_folder: Path) -> None:
    fp = from_folder(qwen2_folder, "bfloat16")

    def graphs(cfg: PivotConfig) -> int | None:
        rollout = plan_memory(cfg, fp, fp, nnodes=1, devices_per_node=4).devices[0]
        return {i.what: i.nbytes for i in rollout.items}.get("decode graphs")

    base = _cfg(gpu_memory_gb=1.0)
    assert graphs(base) == 4 * 64 * 4 * 2 + 4 * (128 // 64 + 2) * 4  # flex: its block tables
    flash = base.replace(model=ModelConfig(dtype="bfloat16", attention="flash"))
    assert graphs(flash) == 4 * 64 * 4 * 2  # flash-attn reads the paged cache in place
    off = base.replace(
        rollout=RolloutConfig(
            tp=2, engine=EngineConfig(kv_capacity_tokens=128, decode_graphs="off")
        )
    )
    assert graphs(off) is None
    assert graphs(base.replace(cluster=ClusterConfig(device="cpu", gpu_memory_gb=1.0))) is None
    vllm = base.replace(rollout=RolloutConfig(tp=2, engine=EngineConfig(backend="vllm")))
    assert graphs(vllm) is None


def test_an_auto_micro_batch_is_the_largest_power_of_two_that_fits(qwen2_folder: Path) -> None:
    from pivot.config.train import UNKNOWN_DEVICE_MICRO_BATCH
    from pivot.memory.plan import TRAIN_HEADROOM, fitting_budget, training_usage

    fp = from_folder(qwen2_folder, "bfloat16")
    auto = TrainConfig(devices=2, activation_checkpointing=True)
    assert fitting_budget(fp, 2, auto, capacity=0) == UNKNOWN_DEVICE_MICRO_BATCH  # CPU
    assert fitting_budget(fp, 2, TrainConfig(devices=2, micro_batch_tokens=300), 10**6) == 300

    def usage(n: int) -> int:
        return training_usage(fp, 2, n, True, 0).total

    capacity = int(usage(8192) / (1 - TRAIN_HEADROOM)) + 1  # 8K fits with the headroom, 16K not
    assert fitting_budget(fp, 2, auto, capacity) == 8192
    assert fitting_budget(fp, 2, auto, capacity=1) == 1024  # nothing fits: the plan says so
    plan = plan_memory(_cfg(gpu_memory_gb=capacity / 1e9).replace(train=auto), fp, fp, 1, 4)
    assert plan.devices[-1].where.endswith("micro-batches of 8,192 tokens)")
