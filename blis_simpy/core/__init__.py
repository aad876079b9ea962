"""The bottom layer: the read-only types every other layer shares and nothing else.

Requests and the view policies get of them, instance snapshots, roles and lifecycle states,
the router's own state, same-time event ordering, units, block hashing, the error types, the
generic strict loader for config dataclasses, and the Recorder with its record types. Nothing
here imports any other part of the package.
"""
