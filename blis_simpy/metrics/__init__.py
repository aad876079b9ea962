"""What a run measured, computed once from its records (never from live simulation objects):
the summary and tables, inter-token gaps, RawMetrics, anomalies judged at the end, fitness,
and the two reporting conventions (native, and the reference's for compat mode)."""
