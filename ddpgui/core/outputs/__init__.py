"""Files a comparison is written to: figures, tables (summary CSV, LaTeX), the points CSV and run bundles; export writes the chosen ones."""
