"""The runtime's weights: which GPS layout each role reads, the policy's versions, which version each replica serves."""
