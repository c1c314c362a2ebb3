"""The plausible range of every cost-model parameter, and the hardware profiles at its ends.

`RANGES` is the table docs/simulator_cost_model.md prints (nominal values are the
`HardwareProfile` defaults; each range's source is in the docs table). The sensitivity band of a
figure is the figure re-measured on the two corner profiles: `corner(hw, "slow")` sets every
parameter to the end of its range that makes the cluster slower (lower efficiencies and
bandwidths, higher overheads and fixed costs) and `corner(hw, "fast")` to the other end. A
ratio whose band stays on one side of 1 survives the uncertainty of the cost model; the corners
move all parameters together, not one at a time, so the band is wide rather than optimistic.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pivot.sim.hardware import HardwareProfile
from pivot.sim.options import SimOptions

CORNERS = ("slow", "fast")


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    faster_when_high: bool
    """Whether the high end makes the cluster faster (efficiencies, bandwidths)."""


RANGES: dict[str, Range] = {
    "mem_eff": Range(0.28, 0.60, True),
    "step_overhead_s": Range(0.0007, 0.005, False),
    "dec_eff": Range(0.2, 0.5, True),
    "prefill_eff": Range(0.5, 0.7, True),
    "train_mfu": Range(0.35, 0.52, True),
    "tp_overhead_s": Range(0.0002, 0.001, False),
    "host_bw_gb_s": Range(15.0, 60.0, True),
    "train_reload_gb_s": Range(11.0, 44.0, True),
    "up_fixed_s": Range(0.5, 2.0, False),
    "train_up_fixed_s": Range(1.0, 4.0, False),
    "train_down_fixed_s": Range(0.5, 2.0, False),
    "weight_sync_gb_s": Range(1.6, 61.0, True),
}


def corner(hw: HardwareProfile, which: str) -> HardwareProfile:
    """`hw` with every parameter of `RANGES` at its slow or fast end."""
    if which not in CORNERS:
        raise ValueError(f"corner {which!r}: expected one of {', '.join(CORNERS)}")
    fast = which == "fast"
    values = {name: (r.high if r.faster_when_high == fast else r.low) for name, r in RANGES.items()}
    return dataclasses.replace(hw, name=f"{hw.name}-{which}", **values)  # type: ignore[arg-type]


def options_at(opts: SimOptions, which: str) -> SimOptions:
    """`opts` with its hardware at the slow or fast corner: a figure's band is the figure re-run
    with these options."""
    return dataclasses.replace(opts, hardware=corner(opts.hardware, which))


def check_nominal_inside(hw: HardwareProfile) -> None:
    """Raise naming the parameter whose nominal value lies outside its range."""
    for name, r in RANGES.items():
        v = getattr(hw, name)
        if not r.low <= v <= r.high:
            raise ValueError(f"{hw.name}.{name}={v}: outside its range {r.low}..{r.high}")
