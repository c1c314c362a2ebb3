"""Tools for multi-turn rollouts (issue 72): parse the tool calls out of a turn's text
(`calls.py`), load veRL-style tools from a veRL tool config (`registry.py`, with `verl_compat.py`
and the `verl_shim/` stand-in when veRL itself does not import), and run them off the engine's
thread (`runner.py`). `calculator.py` is the tiny task's tool, written as a veRL tool file is."""
