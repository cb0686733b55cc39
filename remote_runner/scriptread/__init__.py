"""Readers of what a user's script prints and logs: printed lines, progress-bar frames, log files."""
