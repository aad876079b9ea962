"""Units and constants shared by every layer, defined once.

Simulated time is integer microseconds on the SimPy clock (the reference's int64 ticks); files
and summaries speak seconds and milliseconds.
"""

US_PER_S = 1_000_000
US_PER_MS = 1_000
VOCAB = 128_000  # token ids are drawn from [0, VOCAB), like the reference's generator

# Limits on what a scenario may ask for (docs/reference/outputs.md, "Degenerate runs and
# limits"): beyond them a run would overflow the integer clock or exhaust memory long before it
# ends, so they are refused up front.
MAX_INT = 2**53  # any integer in a scenario (exact as a float, as YAML may write it)
MAX_FLOAT = 1e12  # magnitude of any number in a scenario
MIN_POSITIVE = 1e-9  # smallest value of a number that must be > 0 (rates, scales, periods)
TICK_S = 1e-6  # smallest duration that must be > 0: one µs, so it stays > 0 on the clock
MAX_SIM_S = 1e9  # simulated seconds (~32 years; µs stay exact in a float64)
# The clock's limit while a run goes: what a scenario's values cannot reach alone, a policy's
# delays or many long think times can; the run ends there as at a horizon, and says so.
MAX_SIM_US = round(MAX_SIM_S * US_PER_S)
# How often admission may delay one request (decide again later) before it is rejected: a
# policy that never admits it would otherwise keep the run going for ever.
MAX_ADMISSION_DELAYS = 1_000
MAX_REQUESTS = 10_000_000  # requests one run may generate (~1 KB of memory each)
MAX_TOKENS = 10_000_000  # tokens in one request
# Tokens of all requests (their ids in memory, the steps that serve them): ~1,000 a request
# at the request limit, an hour or so of simulation.
MAX_TOTAL_TOKENS = 10_000_000_000
MAX_POLLS = 10_000_000  # periodic events (autoscaler polls, random crashes) over a run
MAX_KV_BLOCKS = 10_000_000  # KV blocks per instance
MAX_INSTANCES = 4096


def us(seconds: float) -> int:
    """Seconds -> µs, rounded to the nearest tick (config values; never a reference truncation)."""
    return round(seconds * US_PER_S)
