"""Building blocks shared by every decoder family: linear layers, RMSNorm and rotary embeddings."""

from __future__ import annotations

import torch
from torch import nn

from pivot.model.meta_init import building_on_meta


def make_linear(in_features: int, out_features: int, bias: bool, kind: str) -> nn.Module:
    """torch Linear, or transformer-engine's (GPU, same parameter names) when asked for."""
    if kind == "te":
        import transformer_engine.pytorch as te

        # TE's `device` defaults to "cuda" whatever torch.device context is active: a model built
        # on meta (`params_on_meta`) would first allocate and initialise every whole weight on the GPU
        device = "meta" if building_on_meta() else torch.get_default_device()
        return te.Linear(in_features, out_features, bias=bias, device=device)
    return nn.Linear(in_features, out_features, bias=bias)


class RMSNorm(nn.Module):
    """`zero_centered` (Qwen3.5) stores w - 1: the scale is (1 + w), applied in fp32."""

    def __init__(self, dim: int, eps: float, zero_centered: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if zero_centered else torch.ones(dim))
        self.eps, self.zero_centered = eps, zero_centered

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # normalise in fp32 like the reference implementation, then cast back
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.zero_centered:
            return (x32 * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * x32.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """cos/sin over the first `rotary_dim` channels of a head.

    Two layouts of the rotated pairs: `interleaved=False` pairs channel j with j + rotary_dim/2
    (Qwen, Llama); `interleaved=True` pairs channels 2j and 2j+1 (GLM-4).

    The frequency table is fp32 whatever the model's dtype, and this class is the one place that
    says so: `nn.Module.to(bfloat16)` casts buffers too, and a bf16 table is off by 0.12 rad at
    position 100 and by whole turns at 4,000 (rope_theta 1e6), so an engine cast that way would
    serve a different model from the trainer's (FSDP2's mixed precision casts parameters only).
    Every cast, move or `to_empty` (`_apply`) rebuilds the table in fp32 from `theta` on the
    table's new device: upcasting the rounded one would not give the precision back.
    """

    inv_freq: torch.Tensor  # a buffer (register_buffer)

    def __init__(self, rotary_dim: int, theta: float, interleaved: bool = False) -> None:
        super().__init__()
        self.rotary_dim, self.theta = rotary_dim, theta
        self.register_buffer("inv_freq", self._table(torch.device("cpu")), persistent=False)
        self.interleaved = interleaved

    def _table(self, device: torch.device) -> torch.Tensor:
        exponents = torch.arange(0, self.rotary_dim, 2, dtype=torch.float32, device=device)
        return 1.0 / (self.theta ** (exponents / self.rotary_dim))

    def _apply(self, fn, recurse=True):  # nn.Module's signature
        super()._apply(fn, recurse)
        self.inv_freq = self._table(self.inv_freq.device)
        return self

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq.to(positions.device)
        emb = (
            freqs.repeat_interleave(2, dim=-1)
            if self.interleaved
            else torch.cat([freqs, freqs], dim=-1)
        )
        return emb.cos(), emb.sin()


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """x: [B, T, H, D]; cos/sin: [B, T, R] in fp32 with R <= D; channels past R pass through."""
    x32 = x.float()
    rot = cos.shape[-1]
    xr = x32[..., :rot]
    if interleaved:
        rotated = torch.stack([-xr[..., 1::2], xr[..., 0::2]], dim=-1).flatten(-2)
    else:
        half = rot // 2
        rotated = torch.cat([-xr[..., half:], xr[..., :half]], dim=-1)
    out = xr * cos[:, :, None] + rotated * sin[:, :, None]
    if rot < x32.shape[-1]:
        out = torch.cat([out, x32[..., rot:]], dim=-1)
    return out.to(x.dtype)
