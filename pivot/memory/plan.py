"""The memory plan of a configuration: bytes per device for each role, bytes per host, and
what does not fit. Pure arithmetic over `ModelFootprint`s; every formula is stated here.

Per device of an inference replica of TP = t (b = bytes of the model dtype):
    weights      tensors split under TP (`tp_plan`) count 1/t, the rest whole
    KV cache     kv_capacity_tokens * 2 (K and V) * kv_layers * ceil(kv_heads / t) * head_dim * b
    activations  max_prefill_tokens * (4 * hidden + 3 * ceil(intermediate / t)) * b
                 + max_running_seqs * vocab * 4            (one chunk's hidden states, q/k/v and
                 gate/up/down of one layer; fp32 full-vocabulary logits for sampling)
    decode graphs  the embedded engine on CUDA (decode_graphs auto or cuda) serving a model it
                 graphs (full attention, dense): every graph copies its logits into one buffer and
                 all share one pool captured largest first, so (S = max_running_seqs, W the
                 widest context: the role's longest sequence (`engine.max_seq_len`, else the
                 rollout's max_prompt_tokens + its longest response; the judge's bound needs its
                 tokenizer, so the reward's is the model's max_position_embeddings), at most
                 kv_capacity_tokens; pivot/engine/decode_graphs.py)
                 S * vocab * 4 * 2                     the shared logits and the largest graph's
                                                       own before its copy
                 with the gather reference, + S * W * (2 * ceil(kv_heads / t) * head_dim
                 + ceil(heads / t)) * b                the largest graph's K/V gather of one
                                                       layer and its attention scores
                 (heads = hidden / head_dim); flex and flash-attn read the paged cache in place,
                 flex from block tables of S * (kv_capacity_tokens / block + 2) * 4 bytes
Per device of the training pool of D devices (FSDP2, fp32 master parameters, AdamW):
    master       4 * ceil(P / D)       fp32 parameters (the trainer's only weights)
    gradients    4 * ceil(P / D)
    optimizer    8 * ceil(P / D)       Adam's two fp32 moments
    KL reference 4 * ceil(P / D)       the initial policy's fp32 shards, with train.kl_coef > 0
    all-gather   2 * largest layer * b  (the layer computing and the one prefetched)
    activations  micro_batch_tokens * layers * (8 * hidden + 4 * intermediate) * b
                 (saved tensors of every layer without recomputation) or, with
                 train.activation_checkpointing,
                 micro_batch_tokens * (layers * hidden + 8 * hidden + 4 * intermediate) * b
                 (every layer's input kept for the recompute, one layer's saved tensors while it
                 is recomputed); micro-batches are packed, so these are real tokens
    LM-head chunk  min(logprob_chunk_tokens, micro_batch_tokens) * vocab * (4 + b)
                 (one chunk's logits in the model dtype and its fp32 buffer, which becomes the
                 softmax and then the logits' gradient in place: pivot/rl/logprobs.py; measured
                 by tools/bench_train.py)
    (a row longer than the budget trains alone: the activations count max(budget, the
                 longest sample) tokens). micro_batch_tokens 0 (auto) is the largest power of two
                 from 1,024 to 65,536 tokens whose usage fits the device with TRAIN_HEADROOM to
                 spare (`fitting_budget`); 4,096 where the device memory is unknown
Per host:
    GPS          2 buffers of every model at the model dtype, replicated on each host or, when the
                 budget is short, sharded over groups of k hosts (`gps_group_size`, the runtime's rule)
    offload      the training devices on one host (at most devices_per_node) times their master,
                 optimizer (and KL reference) bytes, pinned on CUDA while training is shifted down
    staging      a role served by vLLM or sglang: the whole model at the model dtype in host memory
                 for each replica whose leader a host can hold (devices_per_node // tp): vLLM's
                 weight file in /dev/shm for the engine's life, sglang's whole Read on its leader
Pinned memory = GPS (on CUDA hosts) + offload. A capacity of 0 is unknown and not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from pivot.config import EngineConfig, PivotConfig, TrainConfig
from pivot.config.train import UNKNOWN_DEVICE_MICRO_BATCH
from pivot.engine import capabilities
from pivot.gps.layout import gps_group_size, gps_host_bytes
from pivot.memory.footprint import ModelFootprint

GB = 1e9
GPS_BUFFERS = 2


@dataclass(frozen=True)
class Item:
    what: str
    nbytes: int


@dataclass(frozen=True)
class Usage:
    """What one device (of a role) or one host holds, against its capacity."""

    where: str
    items: tuple[Item, ...]
    capacity: int
    """Bytes available; 0 = unknown (not checked)."""
    field: str
    """The config field that sets the capacity."""

    @property
    def total(self) -> int:
        return sum(i.nbytes for i in self.items)

    @property
    def over(self) -> int:
        """Bytes beyond the capacity (0 when it fits or is unknown)."""
        return max(0, self.total - self.capacity) if self.capacity else 0


@dataclass(frozen=True)
class MemoryPlan:
    devices: tuple[Usage, ...]
    hosts: tuple[Usage, ...]
    gps_group: int
    """GPS replication-group size k (1 = every host holds every model)."""
    host_pinned: int
    """Pinned bytes per host: GPS buffers on CUDA hosts, and the trainer's offloaded state."""
    problems: tuple[str, ...]
    """One line per thing that does not fit, naming it and by how much."""


def _problem(u: Usage, configured_gb: float) -> str:
    """One line: what does not fit, its largest part, the capacity's field, and the shortfall."""
    item = max(u.items, key=lambda i: i.nbytes)
    return (
        f"{u.where}: needs {u.total / GB:.2f} GB (largest: {item.what} {item.nbytes / GB:.2f} GB), "
        f"{u.field}={configured_gb:g} is short by {u.over / GB:.2f} GB"
    )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def inference_usage(
    role: str,
    fp: ModelFootprint,
    tp: int,
    kv_tokens: int,
    prefill_tokens: int,
    running_seqs: int,
    capacity: int,
    graphs: str | None = None,
    widest: int = 0,
    block: int = 16,
) -> Usage:
    """`graphs`: the decode graphs' attention kernel (`graphs_kernel`), None without graphs;
    `widest`: the role's longest sequence (0: the KV capacity); `block`: tokens per KV block."""
    b = fp.dtype_bytes
    kv = kv_tokens * 2 * fp.kv_layers * _ceil_div(fp.kv_heads, tp) * fp.head_dim * b
    act = (
        prefill_tokens * (4 * fp.hidden + 3 * _ceil_div(fp.intermediate, tp)) * b
        + running_seqs * fp.vocab * 4
    )
    items: tuple[Item, ...] = (
        Item("weights", fp.tp_bytes(tp)),
        Item("KV cache", kv),
        Item("activations", act),
    )
    if graphs is not None:
        items += (
            Item(
                "decode graphs",
                decode_graph_bytes(
                    fp,
                    tp,
                    min(widest or kv_tokens, kv_tokens),
                    running_seqs,
                    graphs,
                    kv_tokens // block,
                ),
            ),
        )
    return Usage(f"{role} device (TP={tp}, {fp.name})", items, capacity, "cluster.gpu_memory_gb")


def decode_graph_bytes(
    fp: ModelFootprint, tp: int, widest: int, running_seqs: int, kernel: str, blocks: int = 0
) -> int:
    """The "decode graphs" term of the module docstring."""
    b = fp.dtype_bytes
    if fp.max_positions:
        widest = min(widest, fp.max_positions)
    logits = running_seqs * fp.vocab * 4 * 2
    if kernel == "flash":
        return logits
    if kernel == "flex":
        return logits + running_seqs * (blocks + 2) * 4
    heads = _ceil_div(fp.hidden // max(fp.head_dim, 1), tp)
    per_token = 2 * _ceil_div(fp.kv_heads, tp) * fp.head_dim + heads
    return logits + running_seqs * widest * per_token * b


def graphs_kernel(cfg: PivotConfig, engine: EngineConfig, fp: ModelFootprint) -> str | None:
    """The attention kernel of a replica's decode graphs, or None when it captures none: another
    backend, a CPU or emulated run, graphs off, or a model the engine never graphs."""
    if (
        not capabilities(engine.backend).captures_graphs
        or cfg.cluster.device not in ("auto", "cuda")
        or engine.decode_graphs not in ("auto", "cuda")
        or not fp.graphable
    ):
        return None
    return engine.paged_kernel(cfg.model.attention)


def training_usage(
    fp: ModelFootprint,
    devices: int,
    micro_batch_tokens: int,
    recompute: bool,
    capacity: int,
    kl_reference: bool = False,
    logprob_chunk_tokens: int = TrainConfig.logprob_chunk_tokens,
    longest_row: int = 0,
) -> Usage:
    """`longest_row`: the longest sample's tokens, which trains alone when over the budget: a
    micro-batch's activations are of max(micro_batch_tokens, longest_row) tokens."""
    b = fp.dtype_bytes
    shard = _ceil_div(fp.params, devices)
    layer_act = (8 * fp.hidden + 4 * fp.intermediate) * b
    kept = fp.layers * fp.hidden * b + layer_act if recompute else fp.layers * layer_act
    tokens = max(micro_batch_tokens, longest_row)
    chunk = min(logprob_chunk_tokens, tokens)
    items = (
        Item("master weights fp32", 4 * shard),
        Item("gradients fp32", 4 * shard),
        Item("optimizer fp32", 8 * shard),
        *((Item("KL reference fp32", 4 * shard),) if kl_reference else ()),
        Item("FSDP all-gather", 2 * fp.layer_params() * b),
        Item("activations", tokens * kept),
        Item("LM-head chunk", chunk * fp.vocab * (4 + b)),
    )
    where = f"train device (FSDP over {devices}, {fp.name}, micro-batches of {micro_batch_tokens:,} tokens)"
    return Usage(where, items, capacity, "cluster.gpu_memory_gb")


TRAIN_HEADROOM = 0.1
"""The share of a training device `fitting_budget` leaves free: the allocator's fragmentation
and what the plan does not count (the guard, pivot/roles/oom_guard.py, splits a step whose
micro-batch would not fit after all)."""


def fitting_budget(
    fp: ModelFootprint, devices: int, train: TrainConfig, capacity: int, longest_row: int = 0
) -> int:
    """`train.micro_batch_tokens`, or where it is 0 (auto) the largest power of two from 1,024 to
    65,536 tokens whose training usage (with rows of up to `longest_row` tokens) fits `capacity`
    bytes less TRAIN_HEADROOM (1,024 when none does: the plan then says it does not fit)."""
    if train.micro_batch_tokens:
        return train.micro_batch_tokens
    if not capacity:
        return UNKNOWN_DEVICE_MICRO_BATCH
    room = capacity * (1 - TRAIN_HEADROOM)
    fits = [
        n
        for n in (1 << k for k in range(10, 17))
        if training_usage(
            fp,
            devices,
            n,
            train.activation_checkpointing,
            capacity,
            train.kl_coef > 0,
            train.logprob_chunk_tokens,
            longest_row,
        ).total  # fmt: skip
        <= room
    ]
    return max(fits, default=1024)


def offload_bytes(train: Usage) -> int:
    """What a training device parks in host memory while shifted down: master, optimizer and
    the KL reference."""
    parked = ("master weights fp32", "optimizer fp32", "KL reference fp32")
    return sum(i.nbytes for i in train.items if i.what in parked)


def plan_memory(
    cfg: PivotConfig,
    policy: ModelFootprint,
    genrm: ModelFootprint,
    nnodes: int,
    devices_per_node: int,
) -> MemoryPlan:
    world = nnodes * devices_per_node
    gpu = int(cfg.cluster.gpu_memory_gb * GB)
    host = int(cfg.cluster.host_memory_gb * GB)
    train_devices = world if cfg.cluster.mode == "colocated" else cfg.train.pool
    devices = []
    role_bound = cfg.rollout.max_prompt_tokens + cfg.longest_response()[0]
    for role, fp, rc in (("rollout", policy, cfg.rollout), ("reward", genrm, cfg.reward)):
        e = rc.engine
        devices.append(
            inference_usage(
                role,
                fp,
                rc.tp,
                e.kv_capacity_tokens,
                e.max_prefill_tokens,
                e.max_running_seqs,
                gpu,
                graphs_kernel(cfg, e, fp),
                e.max_seq_len or (role_bound if role == "rollout" else 0),
                e.kv_block_size(cfg.model.attention),
            )  # fmt: skip
        )
    if train_devices:
        t = cfg.train
        devices.append(
            training_usage(
                policy,
                train_devices,
                fitting_budget(policy, train_devices, t, gpu, role_bound),
                t.activation_checkpointing,
                gpu,
                t.kl_coef > 0,
                t.logprob_chunk_tokens,
                role_bound,
            )
        )
    problems = [_problem(u, cfg.cluster.gpu_memory_gb) for u in devices if u.over]

    models = {"policy": policy.specs, "genrm": genrm.specs}
    try:
        k, gps = gps_group_size(models, nnodes, host if host else 1 << 62, GPS_BUFFERS)
    except ValueError:  # not even one shard per host fits: show the smallest need (k = all hosts)
        k, gps = nnodes, gps_host_bytes(models, nnodes, GPS_BUFFERS)
    kind = "replicated" if k == 1 else f"grouped, k={k}"
    items = [Item(f"GPS buffers ({kind}, {GPS_BUFFERS} per model)", gps)]
    if train_devices:
        trainers_here = min(train_devices, devices_per_node)
        items.append(
            Item(
                f"trainer offload ({trainers_here} devices)",
                trainers_here * offload_bytes(devices[-1]),
            )
        )
    pinned = sum(i.nbytes for i in items[0 if cfg.cluster.device == "cuda" else 1 :])
    for role, fp, rc in (("rollout", policy, cfg.rollout), ("reward", genrm, cfg.reward)):
        if capabilities(rc.engine.backend).reads_whole_model:
            leaders = max(1, devices_per_node // rc.tp)
            what = f"{rc.engine.backend} staging ({leaders} {role} leader{'s' * (leaders > 1)})"
            items.append(Item(what, leaders * fp.nbytes))
    hosts = (Usage(f"host (each of {nnodes})", tuple(items), host, "cluster.host_memory_gb"),)
    problems += [_problem(u, cfg.cluster.host_memory_gb) for u in hosts if u.over]
    return MemoryPlan(tuple(devices), hosts, k, pinned, tuple(problems))
