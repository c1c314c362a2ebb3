"""A rank's life: distributed start-up, the SPMD worker loop, liveness across hosts, start-up profiles, the way out."""
