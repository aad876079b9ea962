"""Scenario data and its validation: frozen dataclasses loaded from YAML (every error names
its path), the bundled coefficient catalog and model/GPU data, and the resolution of defaults
that depend on other values. Builds no engine objects."""
