"""The wire's per-decision encoding, compiled (setup.py's COMPILED): what both sides of the
boundary do for every policy call, in C rather than interpreted (docs/security.md, "The
wire"; `blis_simpy.search.wire` has the protocol and re-exports these).

* Frames: every message either way is a 4-byte little-endian length and a body; a length of
  2**24 or more is not a frame (the top byte is 0), so a stray JSON line read as a header is
  refused as what it is.
* The evaluator's messages: marshal, with requests' block hashes as their 64-bit bytes, kept
  per hashes tuple (the same prepared workload's requests are evaluated again and again).
* A routing decision's reply, when it is the usual one (`RoutingDecision(target, reason,
  scores)`, the scores floats, the rest defaults): a fixed binary record, `b"R"`, three
  16-bit lengths (target and reason in UTF-8 bytes, the number of scores), the two strings,
  the scores as 64-bit floats (exact, no text). Any other reply is JSON. The evaluator
  decodes the record strictly (every length checked against the body's, strict UTF-8) and
  the policy guard then checks what it means, as for any decision.
"""

from __future__ import annotations

import marshal
import struct
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Final

from blis_simpy.core.request import HintedView, LoraView, RequestView, plain_view
from blis_simpy.core.snapshot import NO_EXTENDED, InstanceSnapshot, Role
from blis_simpy.policies.routing import RoutingDecision

MARSHAL_VERSION: Final = 2  # (3 and 4 track references, several times slower for small messages)
MAX_FRAME: Final = 1 << 24  # lengths at or past this are not frame headers
TUPLE_NEW: Final = tuple.__new__
ROLE_VALUES: Final[dict[Any, str]] = {role: role.value for role in Role}  # (not `.value`)
ROLES: Final[dict[str, Any]] = {role.value: role for role in Role}
HEAD: Final = struct.Struct("<I")
DECISION: Final = struct.Struct("<cHHH")  # b"R", target bytes, reason bytes, number of scores
DECISION_TAG: Final = b"R"
DECISION_SIZE: Final = DECISION.size
FRAMED_DECISION: Final = struct.Struct("<IcHHH")  # a frame's length, then DECISION
SCORE_STRUCTS: Final[dict[int, struct.Struct]] = {}  # the layout of n scores, made once per n
DUMPS: Final = marshal.dumps
# Hashes packed, by the identity of their last integer: (the hashes, their bytes).
HASH_PACKS: Final[dict[int, tuple[tuple[int, ...], object]]] = {}
HASH_STRUCTS: Final[dict[int, struct.Struct]] = {}  # (counts are bounded: a request's tokens)
MAX_PACKS: Final = 1 << 14  # hashes tuples remembered (a 1,000-request workload keeps 1,000)


def frame(message: Any) -> bytes:
    """One message from the evaluator: its length, then the message in marshal's format
    (ValueError if it holds anything but plain values). Numbers must be Python's own: marshal
    writes any object with the buffer protocol (a numpy scalar) as its bytes; what crosses
    comes from the engine's typed records and snapshots, which hold Python numbers."""
    body = marshal.dumps(message, MARSHAL_VERSION)
    return HEAD.pack(len(body)) + body


def framed(body: bytes) -> bytes:
    """A reply's body as a frame (the candidate's side)."""
    return HEAD.pack(len(body)) + body


def snapshot_out(s: tuple[Any, ...]) -> tuple[Any, ...]:
    """`(id, role, the twelve numbers in field order)`, and the `extended` values as a last
    item when there are any."""
    if s[14]:
        return (s[0], ROLE_VALUES[s[1]], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9],
                s[10], s[11], s[12], s[13], {str(k): float(v) for k, v in s[14].items()})
    return (s[0], ROLE_VALUES[s[1]], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
            s[11], s[12], s[13])


def snapshot_in(f: tuple[Any, ...]) -> Any:
    extended = MappingProxyType(dict(f[14])) if len(f) > 14 else NO_EXTENDED
    # (the tuple built directly: a named tuple's own __new__ is a Python function)
    return TUPLE_NEW(InstanceSnapshot, (f[0], ROLES[f[1]], f[2], f[3], f[4], f[5], f[6], f[7],
                                        f[8], f[9], f[10], f[11], f[12], f[13], extended))


def snapshots_in(items: list[Any], into: list[Any]) -> None:
    """Each snapshot of a call, rebuilt, appended to `into`."""
    for f in items:
        into.append(snapshot_in(f))


def hash_struct(count: int) -> struct.Struct:
    """The layout of `count` block hashes, made once per count."""
    layout = HASH_STRUCTS.get(count)
    if layout is None:
        layout = HASH_STRUCTS[count] = struct.Struct(f"<{count}Q")
    return layout


def hashes_out(hashes: Any) -> object:
    """Block hashes (unsigned 64-bit) as their little-endian bytes: marshal writes and reads
    big integers digit by digit, ten times slower than struct. Anything else as it is."""
    try:
        return hash_struct(len(hashes)).pack(*hashes)
    except struct.error:
        return tuple(hashes)


def packed(hashes: Any) -> object:
    """`hashes_out(hashes)`, kept per hashes tuple by its content: the evaluations of one
    prepared workload send the same requests' hashes, each in a tuple its run's view made
    afresh (`Request.observe`), so a tuple's identity never recurs but its content (the same
    int objects) does. Looked up by the identity of the last integer (the entry holds it, so
    no other object can take its address meanwhile) and then compared, which the same int
    objects make cheap: hashing forty 64-bit integers per decision cost ~3 K instructions."""
    if type(hashes) is not tuple or not hashes:
        return hashes_out(hashes)
    key = id(hashes[-1])
    kept = HASH_PACKS.get(key)
    if kept is not None and (kept[0] is hashes or kept[0] == hashes):
        return kept[1]
    out = hashes_out(hashes)
    if len(HASH_PACKS) >= MAX_PACKS:
        HASH_PACKS.clear()
    HASH_PACKS[key] = (hashes, out)
    return out


def whole(view: Any) -> tuple[Any, ...]:
    """A view as a tuple, sent whole."""
    item = (view.id, view.arrival_us, view.input_tokens, view.tenant_id, view.slo_class,
            packed(view.prefix_hashes))
    if type(view) is RequestView:
        return item
    hints = view.priority_hints
    if hints:  # a priority decision's hints (seed G.1): plain data, checked by the guard
        return (*item, view.adapter, dict(hints))
    if view.adapter:  # (a LoRA adapter's name only when there is one: the usual wire)
        return (*item, view.adapter)
    return item


def view_in(item: Any) -> Any:
    """The view a tuple from `whole` describes."""
    hashes = item[5]
    if type(hashes) is bytes:
        hashes = hash_struct(len(hashes) >> 3).unpack(hashes)
    if len(item) > 7:
        return HintedView(item[0], item[1], item[2], item[3], item[4], hashes, item[6],
                          MappingProxyType(item[7]))
    if len(item) > 6:
        return LoraView(item[0], item[1], item[2], item[3], item[4], hashes, item[6])
    return plain_view(item[0], item[1], item[2], item[3], item[4], hashes)


def route_frame(handle: int, req: Any, priority: object, snapshots: Sequence[Any],
                delta: object, clock: object, hits: object) -> bytes:
    """A routing call's message: the view whole (each request is routed once), the
    snapshots, what changed in the router state, the clock, the shadow KV's hits."""
    taken = [snapshot_out(s) for s in snapshots]
    body = DUMPS(["route", handle, whole(req), priority, taken, delta, clock, hits],
                 MARSHAL_VERSION)
    return HEAD.pack(len(body)) + body


def route_reply(out: object) -> bytes | None:
    """The candidate's decision as the fixed record, if it is the usual kind; else None (it
    goes as JSON)."""
    if type(out) is not RoutingDecision:
        return None
    decision: Any = out
    target, reason, scores = decision[0], decision[1], decision[2]
    if type(target) is not str or type(reason) is not str or decision[3] is not None \
            or decision[4] != () or decision[5] != "" or decision[6] != "":
        return None
    if type(scores) is not tuple and type(scores) is not list:
        return None
    for score in scores:
        if type(score) is not float:
            return None
    try:
        target_bytes = target.encode("utf-8")
        reason_bytes = reason.encode("utf-8")
    except UnicodeEncodeError:  # (a lone surrogate: JSON escapes it)
        return None
    count = len(scores)
    if len(target_bytes) > 0xFFFF or len(reason_bytes) > 0xFFFF or count > 0xFFFF:
        return None
    size = DECISION_SIZE + len(target_bytes) + len(reason_bytes) + 8 * count
    return b"".join((FRAMED_DECISION.pack(size, DECISION_TAG, len(target_bytes),
                                          len(reason_bytes), count),
                     target_bytes, reason_bytes, score_struct(count).pack(*scores)))


def score_struct(count: int) -> struct.Struct:
    """The layout of `count` scores, made once per count."""
    layout = SCORE_STRUCTS.get(count)
    if layout is None:
        layout = SCORE_STRUCTS[count] = struct.Struct(f"<{count}d")
    return layout


def route_decision(body: bytes) -> Any:
    """The RoutingDecision a fixed record describes; ValueError if the body is not exactly
    one (lengths that do not add up to the body's, a string that is not UTF-8)."""
    size = len(body)
    if size < DECISION_SIZE:
        raise ValueError(f"{size} bytes, fewer than a decision's header")
    _, target_size, reason_size, count = DECISION.unpack_from(body)
    start = DECISION_SIZE + target_size
    end = start + reason_size
    if end + 8 * count != size:
        raise ValueError(f"its lengths add up to {end + 8 * count} bytes, not its {size}")
    target = body[DECISION_SIZE:start].decode("utf-8")
    reason = body[start:end].decode("utf-8")
    scores = score_struct(count).unpack_from(body, end)
    return TUPLE_NEW(RoutingDecision, (target, reason, scores, None, (), "", ""))
