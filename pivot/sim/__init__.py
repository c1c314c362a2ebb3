"""Cluster simulator (pure Python): the real `pivot.sched` schedulers and `pivot.plan` planner
driving a discrete-event model of rollout, GenRM and training at 16-4096 devices.

    from configs.presets import paper_preset
    from pivot.sim import SimOptions, simulate
    res = simulate(paper_preset("qwen2.5-7b+qwen3-30b-a3b"), SimOptions(steps=4))
"""

from pivot.sim.hardware import H20, H200, HARDWARE, HardwareProfile, SimConfigError
from pivot.sim.options import SimOptions
from pivot.sim.simulator import SimResult, Simulator, simulate
from pivot.sim.workload import LengthDist, Workload

__all__ = [
    "H20",
    "H200",
    "HARDWARE",
    "HardwareProfile",
    "LengthDist",
    "SimConfigError",
    "SimOptions",
    "SimResult",
    "Simulator",
    "Workload",
    "simulate",
]
