"""The control plane: rank 0's controller and the authenticated, typed messages between it and the workers."""
