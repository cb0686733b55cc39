"""Shared test helpers: real parts started and fed for the tests (CLI processes, sshd, Secret Service, runs)."""
