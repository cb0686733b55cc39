"""Files a comparison is written to: figures, tables (CSV, LaTeX), points CSV, run bundles; export writes the chosen ones."""
