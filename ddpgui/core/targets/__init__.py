"""Targets: one interface for running the runner on a host (this computer, SSH), the pool, uploads, the zipapp."""
