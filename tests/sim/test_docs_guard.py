"""The docs' simulated figures stay the simulator's (issue 48, item 4).

A small configuration (both 1.5B and 7B groups on H20 and H200, the paper's Table 4
allocations, a short steady-state window, one seed; PivotRL also on the `embedded-eager` engine
profile) is simulated here and its figures (tokens/s, the bound's kind and the share of it)
compared with the `sim-guard` block of docs/results.md. A change to the simulator, the
scheduler, the planner or the shift executor that moves them fails this test until that block
is updated, and the block's entry says which documented figures were re-measured with it: a
change cannot move the simulator's figures silently under the docs. To print the new block:

    python tests/sim/test_docs_guard.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from configs.presets import paper_preset  # noqa: E402
from pivot.sim import HARDWARE, SimOptions, Workload, simulate  # noqa: E402
from pivot.sim.deploy import deployment, table4  # noqa: E402
from pivot.sim.report import bound_s, bound_share  # noqa: E402

RESULTS = ROOT / "docs" / "results.md"
GROUPS = ("qwen2.5-1.5b+glm-z1-9b", "qwen2.5-7b+qwen3-30b-a3b")
RUNS = (
    ("colocated", "sglang"),
    ("disaggregated", "sglang"),
    ("rr_colocated", "sglang"),
    ("pivot", "sglang"),
    ("pivot", "embedded-eager"),
)
BLOCK = re.compile(r"^```sim-guard\n(.*?)^```", re.M | re.S)


def figures() -> list[str]:
    """One line per run: group, hardware, engine, deployment, tokens/s, bound kind and share."""
    out = []
    for group in GROUPS:
        base = paper_preset(group)
        base.seed = 0
        for hw in ("h20", "h200"):
            for name, engine in RUNS:
                opts = SimOptions(
                    hardware=HARDWARE[hw],
                    engine=engine,
                    steps=5,
                    warmup_steps=2,
                    workload=Workload(prompts_per_step=16, group_size=4),
                )
                res = simulate(deployment(base, name, table4(base, name)), opts)
                kind = bound_s(res)[1]
                out.append(
                    f"{group} {hw} {engine} {name} {res.throughput:.6g} {kind} "
                    f"{bound_share(res):.4f}"
                )
    return out


def documented() -> list[str]:
    blocks = BLOCK.findall(RESULTS.read_text(encoding="utf-8"))
    assert len(blocks) == 1, f"docs/results.md holds {len(blocks)} sim-guard blocks, want 1"
    return [ln for ln in blocks[0].splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.mark.slow  # 20 short simulations: about 7 CPU-s
def test_documented_small_configuration_figures_are_the_simulators() -> None:
    got = figures()
    assert got == documented(), (
        "the simulator's small-configuration figures moved: re-measure the documented figures "
        "the change moves (docs/results.md, README) and replace docs/results.md's sim-guard "
        "block with:\n" + "\n".join(got)
    )


if __name__ == "__main__":
    print("```sim-guard")
    print("\n".join(figures()))
    print("```")
