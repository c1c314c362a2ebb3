"""The embedded default: the synthetic arithmetic task and the tiny policy and GenRM that learn it."""
