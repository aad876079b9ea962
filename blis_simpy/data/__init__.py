"""Bundled reference data: coefficient catalog, GPU figures, model configs, Go RNG tables."""
