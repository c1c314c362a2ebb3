"""What a run leaves behind: its folder, metrics, timeline, progress, checkpoints, and the audit of them."""
