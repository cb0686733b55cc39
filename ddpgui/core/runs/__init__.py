"""Runs: configs, launching, following, reattaching and stopping them (RunManager), multi-node."""
