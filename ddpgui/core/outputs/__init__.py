"""What a comparison is written to: figures, tables, points CSV, bundles."""
