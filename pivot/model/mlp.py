"""Dense feed-forward blocks: SwiGLU with separate gate/up projections, or GLM-4's fused one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pivot.model.layers import make_linear


class MLP(nn.Module):
    """`down(silu(gate(x)) * up(x))`; Qwen/Llama dense layers and every Qwen3-MoE expert."""

    def __init__(self, hidden: int, intermediate: int, linear: str) -> None:
        super().__init__()
        self.gate_proj = make_linear(hidden, intermediate, False, linear)
        self.up_proj = make_linear(hidden, intermediate, False, linear)
        self.down_proj = make_linear(intermediate, hidden, False, linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class FusedMLP(nn.Module):
    """GLM-4's SwiGLU: one `gate_up_proj` whose first half of output rows is the gate."""

    def __init__(self, hidden: int, intermediate: int, linear: str) -> None:
        super().__init__()
        self.gate_up_proj = make_linear(hidden, 2 * intermediate, False, linear)
        self.down_proj = make_linear(intermediate, hidden, False, linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)
