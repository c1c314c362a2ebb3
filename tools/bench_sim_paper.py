"""The paper's figures that tools/bench_sim.py prints the simulated ones beside, and its four
model groups (bench_kv_sim.py reads them from bench_sim.py too)."""

from __future__ import annotations

GROUPS = (
    "qwen2.5-1.5b+glm-z1-9b",
    "qwen2.5-7b+qwen3-30b-a3b",
    "qwen2.5-32b+qwen3-30b-a3b",
    "qwen2.5-72b+qwen3.5-122b-a10b",
)
BASELINES = ("colocated", "disaggregated", "rr_colocated")
# Figure 9 (tokens/s), read from the paper's text and checked against its printed speedups.
PAPER_FIG9 = {
    "qwen2.5-1.5b+glm-z1-9b": {
        "colocated": 27184,
        "disaggregated": 31176,
        "rr_colocated": 25405,
        "pivot": 50077,
    },
    "qwen2.5-7b+qwen3-30b-a3b": {
        "colocated": 11545,
        "disaggregated": 11711,
        "rr_colocated": 14189,
        "pivot": 22822,
    },
    "qwen2.5-32b+qwen3-30b-a3b": {
        "colocated": 9998,
        "disaggregated": 13681,
        "rr_colocated": 11343,
        "pivot": 20503,
    },
    "qwen2.5-72b+qwen3.5-122b-a10b": {
        "colocated": 6915,
        "disaggregated": 7954,
        "rr_colocated": 7530,
        "pivot": 12503,
    },
}
# Figure 11: throughput over disaggregated.
PAPER_FIG11 = {
    "qwen2.5-7b+qwen3-30b-a3b": {
        "static": 1.55,
        "rule_based": 1.31,
        "vanilla": 1.79,
        "vanilla+tm": 1.87,
        "pivot": 1.95,
    },
    "qwen2.5-1.5b+glm-z1-9b": {
        "static": 1.27,
        "rule_based": 1.05,
        "vanilla": 1.43,
        "vanilla+tm": 1.53,
        "pivot": 1.61,
    },
}
# Figure 12 (seconds): inference up ~1 (1.5B) .. ~9 (122B), down < 2; training up 2 .. 8.5, down < 6.
PAPER_FIG12 = (
    "inference up ~1 s (1.5B) .. ~9 s (122B), down < 2 s; training up 2 .. 8.5 s, down < 6 s"
)
# Figure 14: the paper plots throughput and shifts per step for H in 0.01 .. 600; its text says
# throughput is lower with fewer shifts at small H, stable for 60 <= H <= 120, lower again at 600.
H_VALUES = (0.01, 5, 30, 60, 90, 120, 600)
