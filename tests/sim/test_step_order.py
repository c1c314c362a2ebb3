"""The schedulers serve the oldest step first: the batch the trainer waits for."""

from __future__ import annotations

from pivot.sched import Role
from pivot.sim import SimOptions
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.simulator import Simulator, _Seq
from pivot.sim.workload import SimSample
from tests.sim.conftest import small_cfg


def test_a_late_judge_of_an_old_step_queues_before_younger_steps(opts: SimOptions) -> None:
    sim = Simulator(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), opts)
    young = [SimSample(2, i, 0, 100, 50, 40, 350) for i in range(3)]
    old = SimSample(0, 7, 0, 100, 3000, 40, 3300)  # its long rollout finished after step 2's
    for s in young + [old]:
        sim.work.submit(_Seq(Role.REWARD, s, s.judge_prompt_len, s.judge_len))
    order = [sim.work.seqs[q.seq_id].sample for q in sim.cluster.sched[Role.REWARD].queued()]
    assert order == [old] + young
