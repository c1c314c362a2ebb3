"""tools/bench_e2e_emulated.py's report: each mode's emulated throughput beside the simulator's,
over seeds, with device-time shares and token tallies, and the simulator's pivot/mode at the
cost model's corners."""

from __future__ import annotations

import dataclasses

from pivot.emulate.measure import EmulatedRun
from pivot.sim import SimResult
from pivot.sim.report import breakdown
from pivot.sim.window import Spread, Window


def shares_real(r: EmulatedRun, world: int) -> str:
    total = world * r.emulated_s
    return "/".join(
        f"{100 * r.device_s.get(k, 0.0) / total:3.0f}"
        for k in ("rollout", "reward", "train", "shift")
    )


def shares_sim(s: SimResult) -> str:
    b = breakdown(s)
    parts = [b.roles[k].busy for k in ("rollout", "reward", "train")] + [
        sum(t.shifting for t in b.roles.values())
    ]
    return "/".join(f"{100 * x / b.total:3.0f}" for x in parts)


@dataclasses.dataclass(frozen=True)
class Measured:
    real: EmulatedRun
    sim: SimResult
    real_window_s: float

    @property
    def real_tps(self) -> float:
        return (
            self.sim.tokens / self.real_window_s
        )  # the same trained samples (drawn from the simulator's workload)


def report_band(corners: dict[str, dict[str, list[float]]]) -> None:
    """The simulator's pivot/mode at each corner (pivot/sim/band.py), mean (min-max) over seeds."""
    print("\nsimulated pivot/mode at the cost model's corners:")
    for name in next(iter(corners.values())):
        print(
            f"  {name:14s} "
            + "  ".join(
                f"{c} {Spread.of(p / m for p, m in zip(tps['pivot'], tps[name])).fmt('.2f', 'x')}"
                for c, tps in corners.items()
                if "pivot" in tps
            )
        )


def report(results: dict[str, list[Measured]], world: int, length_scale: int, w: Window) -> None:
    ref = results.get("pivot")
    print(
        f"\nmeasured {w.describe()} over seeds (mean (min-max)); the columns after pivot/mode are the first seed's whole run"  # noqa: E501 (one table row, easier read whole)
    )
    print(
        f"{'mode':14s} {'tok/s real':>22s} {'sim':>22s} {'real/sim':>17s} {'w/o tr.overrun':>14s} {'pivot/mode':>18s} "
        f"{'sim':>18s} {'plans':>5s} {'sim':>4s}  busy% ro/rm/tr/shift real | sim      tokens real/sim  "
        f"prefilled real/sim  reused% real | sim"
    )
    for name, ms in results.items():
        real, sim = ms[0].real, ms[0].sim
        tps, stps = Spread.of(m.real_tps for m in ms), Spread.of(m.sim.throughput for m in ms)
        ratio = Spread.of(m.real_tps / m.sim.throughput for m in ms)
        # the training slot's overrun over the whole run, prorated to the window
        fair = Spread.of(
            m.sim.tokens
            / (m.real_window_s * (1 - m.real.train_overrun_s / m.real.emulated_s))
            / m.sim.throughput
            for m in ms
        )
        piv = (
            Spread.of(r.real_tps / m.real_tps for r, m in zip(ref, ms)).fmt(".2f", "x")
            if ref
            else "-"
        )
        piv_sim = (
            Spread.of(r.sim.throughput / m.sim.throughput for r, m in zip(ref, ms)).fmt(".2f", "x")
            if ref
            else "-"
        )
        print(
            f"{name:14s} {tps.fmt():>22s} {stps.fmt():>22s} {ratio.fmt('.2f'):>17s} {fair.fmt('.2f'):>14s} {piv:>18s} "
            f"{piv_sim:>18s} {real.plans:5d} {sim.num_plans:4d}  {shares_real(real, world)} | {shares_sim(sim)}   "
            f"{real.real_tokens * length_scale / all_tokens(sim):15.2f}  {real.prefill_tokens * length_scale / sim.prefill_tokens:18.2f}  "  # noqa: E501 (one table row, easier read whole)
            f"{reused(real.prefill_tokens, real.prefix_hit_tokens):8.0f} | {reused(sim.prefill_tokens, sim.prefix_hit_tokens):3.0f}"  # noqa: E501 (one table row, easier read whole)
        )


def all_tokens(sim: SimResult) -> int:
    """Tokens of every sample the simulator released (the runtime's steps, window or not)."""
    return sum(s.tokens for st in sim.samples.values() for s in st)


def reused(prefilled: int, hits: int) -> float:
    """Percent of the prompt tokens to (re)compute that a shared prefix saved."""
    return 100 * hits / max(prefilled + hits, 1)
