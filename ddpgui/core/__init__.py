"""Everything the app can do, without Qt: hosts, targets, runs, store, analysis, export."""
