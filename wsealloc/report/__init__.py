"""Reports: what the CLI and the Python API show users (tables, JSON, pictures)."""
