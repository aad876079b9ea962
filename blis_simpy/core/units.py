"""Units and constants shared by every layer, defined once.

Simulated time is integer microseconds on the SimPy clock (the reference's int64 ticks); files
and summaries speak seconds and milliseconds.
"""

US_PER_S = 1_000_000
US_PER_MS = 1_000
VOCAB = 128_000  # token ids are drawn from [0, VOCAB), like the reference's generator


def us(seconds: float) -> int:
    """Seconds -> µs, rounded to the nearest tick (config values; never a reference truncation)."""
    return round(seconds * US_PER_S)
