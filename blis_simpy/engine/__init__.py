"""One inference instance: its SimPy step loop (continuous batching, chunked prefill,
preemption), the steady-decode fast path, its KV block pool (`kv/`), the step-time models
(blackbox coefficients, roofline) and the anomalies it detects while running."""
