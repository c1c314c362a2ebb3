"""Gated DeltaNet linear attention (Qwen3.5's `linear_attention` layers), in plain torch.

Per value head the layer keeps a state S [Dk, Dv]. For each token, with decay a = exp(g) and
write strength beta: S <- a S; S <- S + k (beta (v - S^T k))^T; output o = S^T q (q, k
L2-normalised, q scaled by Dk^-1/2). `recurrent_delta_rule` applies this token by token
(decode); `chunked_delta_rule` computes the same in chunks (prefill): inside a chunk the
corrections u solve a unit lower-triangular system (I + A) u = beta (v - gamma K S0), with
A_ij = beta_i (gamma_i / gamma_j) k_i.k_j for j < i and gamma the decay since the chunk start.

Before the rule, q/k/v pass a causal depthwise conv1d (kernel K) and SiLU; after it, an RMSNorm
gated by SiLU(z). A sequence's state between calls is (the last K-1 conv inputs, S).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pivot.model.args import ModelArgs
from pivot.model.layers import make_linear


def _prepare(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
):
    """[B, T, H, D] inputs -> fp32 [B, Hv, T, D] with k/q heads repeated to the value heads."""
    rep = v.shape[2] // k.shape[2]
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=2), k.repeat_interleave(rep, dim=2)
    q, k, v, g, beta = (x.transpose(1, 2).float() for x in (q, k, v, g, beta))
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) * q.shape[-1] ** -0.5
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    return q, k, v, g, beta


def recurrent_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q/k [B, T, Hk, Dk], v [B, T, Hv, Dv], g/beta [B, T, Hv], state [B, Hv, Dk, Dv] -> (o [B, T, Hv, Dv], state)."""
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    b, h, t, dk = k.shape
    s = torch.zeros(b, h, dk, v.shape[-1], device=v.device) if state is None else state.float()
    out = []
    for i in range(t):
        s = s * g[:, :, i].exp()[..., None, None]
        delta = beta[:, :, i, None] * (v[:, :, i] - torch.einsum("bhkv,bhk->bhv", s, k[:, :, i]))
        s = s + k[:, :, i, :, None] * delta[:, :, None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", s, q[:, :, i]))
    return torch.stack(out, dim=1), s


def chunked_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor | None,
    chunk: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as `recurrent_delta_rule`, a chunk of tokens per matrix product."""
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    b, h, t, dk = k.shape
    s = torch.zeros(b, h, dk, v.shape[-1], device=v.device) if state is None else state.float()
    out = []
    for start in range(0, t, chunk):
        sl = slice(start, min(start + chunk, t))
        qc, kc, vc, bc = q[:, :, sl], k[:, :, sl], v[:, :, sl], beta[:, :, sl]
        cum = g[:, :, sl].cumsum(-1)  # log gamma_i
        n = cum.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool, device=v.device).tril()
        # gamma_i / gamma_j for j <= i (zero above the diagonal, where it would overflow)
        ratio = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()
        a = (bc[..., None] * (kc @ kc.transpose(-1, -2)) * ratio).tril(-1)
        system = a + torch.eye(n, device=v.device)
        rhs = bc[..., None] * (vc - cum.exp()[..., None] * (kc @ s))
        u = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
        out.append(cum.exp()[..., None] * (qc @ s) + ((qc @ kc.transpose(-1, -2)) * ratio) @ u)
        to_end = (cum[..., -1:] - cum).exp()[..., None]  # gamma_n / gamma_j
        s = cum[..., -1].exp()[..., None, None] * s + (kc * to_end).transpose(-1, -2) @ u
    return torch.cat(out, dim=2).transpose(1, 2), s


class GatedRMSNorm(nn.Module):
    """RMSNorm over each value head, then times SiLU(gate)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return ((self.weight * x32.to(x.dtype)) * F.silu(gate.float())).to(x.dtype)


class GatedDeltaNet(nn.Module):
    def __init__(self, args: ModelArgs, layer_idx: int, linear: str) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.n_k_heads, self.n_v_heads = (
            args.linear_num_key_heads,
            args.linear_num_value_heads,
        )  # local: TP divides
        self.dk, self.dv, self.kernel = (
            args.linear_key_head_dim,
            args.linear_value_head_dim,
            args.linear_conv_kernel_dim,
        )
        key_dim, value_dim = self.n_k_heads * self.dk, self.n_v_heads * self.dv
        conv_dim = 2 * key_dim + value_dim
        h = args.hidden_size
        self.in_proj_qkv = make_linear(h, conv_dim, False, linear)
        self.in_proj_z = make_linear(h, value_dim, False, linear)
        self.in_proj_b = make_linear(h, self.n_v_heads, False, linear)
        self.in_proj_a = make_linear(h, self.n_v_heads, False, linear)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, self.kernel, groups=conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.n_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.n_v_heads))
        self.norm = GatedRMSNorm(self.dv, args.rms_norm_eps)
        self.out_proj = make_linear(value_dim, h, False, linear)

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [B, T, H] and the (conv inputs [B, C, K-1], delta state) before it -> (output, state after)."""
        b, t, _ = x.shape
        mixed = self.in_proj_qkv(x).transpose(1, 2)  # [B, C, T]
        history = (
            mixed.new_zeros(b, mixed.shape[1], self.kernel - 1)
            if state is None
            else state[0].to(mixed.dtype)
        )
        padded = torch.cat([history, mixed], dim=-1)
        conv = F.silu(F.conv1d(padded, self.conv1d.weight, groups=padded.shape[1])).transpose(1, 2)
        key_dim = self.n_k_heads * self.dk
        q, k, v = conv.split([key_dim, key_dim, self.n_v_heads * self.dv], dim=-1)
        q, k = q.reshape(b, t, self.n_k_heads, self.dk), k.reshape(b, t, self.n_k_heads, self.dk)
        v = v.reshape(b, t, self.n_v_heads, self.dv)
        beta = self.in_proj_b(x).sigmoid()
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)
        rule = recurrent_delta_rule if t == 1 else chunked_delta_rule
        o, delta_state = rule(q, k, v, g, beta, None if state is None else state[1])
        z = self.in_proj_z(x).reshape(b, t, self.n_v_heads, self.dv)
        o = self.norm(o.to(x.dtype), z).reshape(b, t, -1)
        return self.out_proj(o), (padded[..., padded.shape[-1] - (self.kernel - 1) :], delta_state)
