"""The main window's panels: hosts, launch form, runs table, live dashboard, Compare tab, sweeps bar."""
