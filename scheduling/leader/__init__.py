"""The leader: the one process that runs passes, applies their decisions and sweeps for what went
wrong (leadership, snapshot, apply, reconcile, the forecast)."""
