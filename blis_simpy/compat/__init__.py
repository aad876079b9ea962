"""compat layer."""
