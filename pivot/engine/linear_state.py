"""Per-sequence recurrent state of linear-attention layers, kept beside the paged KV cache.

A Gated DeltaNet layer carries, per sequence, its last K-1 conv inputs and its delta-rule
state S; both summarise every token computed so far, so unlike KV blocks they are not paged.
A sequence computed from token 0 (a first prefill, a recompute after preemption, a partial
resumed on another replica) starts from no state; a later chunk or a decode step continues from
the stored one. The leader lists the sequences it finished or aborted in the next step's input
so every TP rank drops them; `clear` runs on release.

Decode steps (one token, state present) run as one batch per layer; prefill chunks run one
sequence at a time (the chunked form of the delta rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

State = tuple[
    torch.Tensor, torch.Tensor
]  # (conv inputs [C, K-1], delta-rule state [Hv, Dk, Dv]) per sequence
LinearLayer = Callable[[torch.Tensor, "State | None"], "tuple[torch.Tensor, State]"]


class LinearStates:
    def __init__(self) -> None:
        self._states: dict[int, dict[int, State]] = {}

    def __len__(self) -> int:
        return len(self._states)

    def drop(self, seq_ids: Iterable[int]) -> None:
        for sid in seq_ids:
            self._states.pop(sid, None)

    def clear(self) -> None:
        self._states.clear()

    def get(self, seq_id: int) -> dict[int, State]:
        """`seq_id`'s state per linear layer ({} before its first token is computed)."""
        return dict(self._states.get(seq_id, {}))

    def put(self, seq_id: int, states: dict[int, State]) -> None:
        """Adopt a migrated sequence's state (pivot/engine/kv_export.py)."""
        self._states[seq_id] = dict(states)

    def run(
        self,
        layer_idx: int,
        layer: LinearLayer,
        x: torch.Tensor,
        seq_ids: list[int],
        starts: list[int],
        q_lens: list[int],
    ) -> torch.Tensor:
        """x: packed [1, N, H] of this step's tokens, sequence after sequence -> the layer's output."""
        segments = x[0].split(q_lens)
        outs: list[torch.Tensor | None] = [None] * len(seq_ids)
        decode = [i for i, (s, n) in enumerate(zip(starts, q_lens)) if s > 0 and n == 1]
        for i, sid in enumerate(seq_ids):
            if i in decode:
                continue
            prev = self._previous(sid, layer_idx, starts[i])
            out, new = layer(
                segments[i][None], None if prev is None else (prev[0][None], prev[1][None])
            )
            self._states.setdefault(sid, {})[layer_idx] = (new[0][0], new[1][0])
            outs[i] = out[0]
        if decode:
            held: list[State] = []
            for i in decode:
                p = self._previous(seq_ids[i], layer_idx, starts[i])
                if p is None:  # a decode step (start > 0) continues a state this cache holds
                    raise RuntimeError(f"linear attention: no state for sequence {seq_ids[i]}")
                held.append(p)
            state = (torch.stack([p[0] for p in held]), torch.stack([p[1] for p in held]))
            out, new = layer(torch.stack([segments[i] for i in decode]), state)
            for j, i in enumerate(decode):
                self._states[seq_ids[i]][layer_idx] = (new[0][j], new[1][j])
                outs[i] = out[j]
        return torch.cat(outs, dim=0)[None]  # type: ignore[arg-type]

    def _previous(self, seq_id: int, layer_idx: int, start: int) -> State | None:
        if start == 0:
            return None
        state = self._states.get(seq_id, {}).get(layer_idx)
        if state is None:
            raise RuntimeError(
                f"sequence {seq_id}: no linear-attention state for layer {layer_idx} at token {start}"
            )
        return state
