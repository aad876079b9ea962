"""workload layer."""
