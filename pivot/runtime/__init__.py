"""The runtime: the paper's system on torch.distributed, by concern.

- `job/`: a rank's life: start-up (`launch.run`), rank 0's controller thread, the SPMD worker
  loop, liveness, the way out.
- `control/`: the control plane: rank 0's controller (planner + shift executor on the real
  cluster) and the authenticated, typed messages between it and the workers.
- `flow/`: the RL sample flow on rank 0: prompts -> rollouts -> judgments -> rewards -> batches.
- `weights/`: the roles' view of GPS (which layout each reads) and the policy's versions.
- `records/`: what a run leaves: its folder, metrics, timeline, progress, checkpoints, audit.
"""
