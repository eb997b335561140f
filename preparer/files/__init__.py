"""On-disk formats the preparer reads and writes: one module per file."""
