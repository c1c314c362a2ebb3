"""The RL sample flow on rank 0: prompts -> rollout sequences -> judge sequences -> rewards -> training batches."""
