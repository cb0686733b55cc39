"""Everything the app can do, without Qt: hosts, ssh, targets, runs, store, sweeps, analysis, outputs."""
