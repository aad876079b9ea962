"""Build: the hot modules of the engine compiled to C extensions with mypyc.

The step loop, the KV cache and the request are plain typed Python; mypyc turns each module
listed here into a C extension that the interpreter imports instead of the .py, which stays
the source (and what runs when the extensions are not built). Compiled, the benchmark runs
about 1.3-1.5x faster in process (docs/performance.md, "Compiled modules").

`BLIS_SIMPY_PURE=1 pip install ...` installs without compiling, as does a machine without a C
compiler (with a warning from the build). An editable install builds the
extensions next to the sources: after editing one of these modules, `make compile` rebuilds
them (`make test` does it when a source is newer than its extension).
"""

import os
import sys

from setuptools import Extension, setup

# Work per step, per KV block and per request. Policies stay interpreted: user policies
# subclass them, and a compiled class cannot be subclassed by an interpreted one unless
# marked (`mypyc_attr(allow_interpreted_subclasses=True)`, as the KV caches are).
COMPILED = [
    "blis_simpy/core/loop.py",
    "blis_simpy/core/request.py",
    "blis_simpy/core/router_state.py",
    "blis_simpy/core/shadow_kv.py",
    "blis_simpy/engine/alpha.py",
    "blis_simpy/engine/anomalies.py",
    "blis_simpy/engine/instance.py",
    "blis_simpy/engine/kv/cache.py",
    "blis_simpy/engine/kv/freelist.py",
    "blis_simpy/engine/kv/pool.py",
    "blis_simpy/engine/kv/reference.py",
    "blis_simpy/engine/latency.py",
    "blis_simpy/engine/physical.py",
    "blis_simpy/engine/reference_order.py",
    "blis_simpy/engine/speculative.py",
    "blis_simpy/engine/steady.py",
    "blis_simpy/engine/step.py",
    "blis_simpy/cluster/gateway.py",
    "blis_simpy/cluster/snapshot.py",
    "blis_simpy/policies/scorers.py",
    "blis_simpy/search/codec.py",
    "blis_simpy/rng/gomath.py",
    "blis_simpy/workload/release.py",
    "blis_simpy/workload/sampling.py",
    "blis_simpy/workload/synthetic.py",
    "blis_simpy/workload/tenants.py",
]


# The native calls of a code candidate's lock-down (personality, prctl, the seccomp filter,
# mmap), in plain C so that a candidate's process never loads ctypes (docs/security.md). A
# pure install makes the same calls through ctypes (blis_simpy/search/ctypes_lockdown.py).
LOCKDOWN = Extension("blis_simpy.search.lockdown", ["blis_simpy/search/lockdown.c"])


def extensions() -> list:
    if os.environ.get("BLIS_SIMPY_PURE"):
        return []
    from mypyc.build import mypycify

    built = mypycify(COMPILED, opt_level="3", group_name="blis_simpy.compiled")
    if sys.platform == "linux":  # (the sandbox is Linux's only)
        built.append(LOCKDOWN)
    for extension in built:  # no C compiler: install the plain modules rather than fail
        extension.optional = True
    return built


setup(ext_modules=extensions())
