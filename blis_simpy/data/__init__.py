"""Bundled data files (no code): the coefficient catalog, GPU figures, HuggingFace model
configs for the roofline model, and Go's math/rand tables."""
