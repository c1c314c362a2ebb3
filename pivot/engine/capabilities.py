"""What an inference backend can do, as the rest of Pivot needs to know it: `Capabilities`, and
`capabilities(backend)` for each `EngineConfig.backend`.

Roles, the runtime, the memory plan and the config checks ask these questions instead of
comparing backend names, so a new backend is one entry here and one case in the factory
(`pivot.engine.factory`). Pure Python (no torch): config parsing and the memory plan read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    owns_processes: bool
    """One engine serves the whole replica, built by its leader rank over the replica's devices:
    it starts its own processes there and shards the model over TP itself. The replica's other
    ranks hold a parked stand-in (`pivot.engine.parked`), and the engine must be shut down. Else
    every rank of the replica runs its own engine in lockstep, sharded by Pivot's TP."""
    reads_whole_model: bool
    """The leader's GPS Read brings every tensor whole (staged in host memory), not this rank's
    TP slice."""
    migrates_kv: bool
    """Exports an aborted sequence's K/V and imports it where the partial is added again
    (`pivot.engine.kv_export`); without it a migrated partial is re-prefilled."""
    captures_graphs: bool
    """Captures Pivot's own decode graphs (their memory is in the memory plan)."""
    returns_whole_weights: bool
    """Can hand back every weight whole and HF-named (`named_parameters_hf`, for
    --log.verify-weights)."""


EMBEDDED = Capabilities(
    owns_processes=False,
    reads_whole_model=False,
    migrates_kv=True,
    captures_graphs=True,
    returns_whole_weights=True,
)
PRODUCTION = Capabilities(
    owns_processes=True,
    reads_whole_model=True,
    migrates_kv=False,  # neither imports Pivot's KV handles (docs/kv_migration.md)
    captures_graphs=False,  # each captures its own, inside its memory budget
    # sglang 0.5.23: no get_weights_by_name for Qwen2/Qwen3/Qwen3-MoE/GLM-4, TP shards for
    # Llama (backends/sglang_weights.py WHOLE_WEIGHTS_BY_NAME); vLLM repacks them for its kernels
    returns_whole_weights=False,
)
BACKENDS = {"embedded": EMBEDDED, "sglang": PRODUCTION, "vllm": PRODUCTION}


def capabilities(backend: str) -> Capabilities:
    """What `backend` (an `EngineConfig.backend`) can do."""
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"engine.backend={backend!r} is not one of {sorted(BACKENDS)}") from None
