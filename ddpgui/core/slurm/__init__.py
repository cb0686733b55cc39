"""Slurm clusters: job scripts, the queue's and partitions' output read, job states mapped onto the app's (pure)."""
