"""Plots: live curves over growing buffers, the dashboard's run traces, the Compare tab's bars."""
