"""Pivot's stand-in for the package `verl`, used only when veRL itself does not import
(`pivot.tools.verl_compat`). It holds just what a veRL tool file imports: `verl.tools.base_tool`,
`verl.tools.schemas`, `verl.utils.rollout_trace` and `verl.utils.reward_score.gsm8k`. Written
for Pivot from veRL's documented contract (0.6.1 and 0.9.1); none of veRL's code is copied."""
