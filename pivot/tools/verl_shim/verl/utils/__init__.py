"""Pivot's stand-in for the veRL module `verl.utils`, used only when veRL itself does not import.

Only `rollout_trace` and `reward_score.gsm8k` are here: what veRL's tool files import."""
