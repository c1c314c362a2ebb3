"""Pivot's stand-in for the veRL module `verl.utils.reward_score`, used only when veRL itself
does not import. Only its `gsm8k` scorer is here (veRL's gsm8k tool imports it); veRL's
`default_compute_score` dispatch is not: Pivot's reward side has its own (`pivot.rl.plugins`)."""
