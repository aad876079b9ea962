"""`dataclasses` sealed in the sandbox (`search/sealed.py`): attacker 20b's three routes past
the static check through field names, each a candidate the check accepts, now a zero with the
reason; and dataclasses as policies use them still work (asdict, astuple, replace, fields,
frozen, inheritance)."""

from __future__ import annotations

import pytest

from blis_simpy.search.code import CodePolicy, check
from blis_simpy.search.sweep import run_many
from tests.search.helpers import prefix_scenario

ROUTE = """
class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        print("reached", reached())
        return RoutingDecision(snapshots[0].id, "first", tuple(1.0 for _ in snapshots))
"""
U = ('U = "_"\ndef payload():\n'
     '    return "().{0}class{0}.{0}base{0}.{0}subclasses{0}()".format(U * 2)\n')
ATTACKER_20B = {
    # a field renamed to a dunder, held by a metaclass: asdict read object.__getattribute__
    "renamed field on a metaclass": """from dataclasses import dataclass, fields, asdict
@dataclass
class Holder:
    a: int = 0
def reached():
    field = fields(Holder)[0]
    field.name = U * 2 + "getattribute" + U * 2
    meta = type("Meta", (type,), {U * 2 + "dataclass_fields" + U * 2: {"a": field}})
    return asdict(meta("Probe", (), {}))[field.name]
""",
    # a field name from an annotations key built at run time: code in the generated __repr__
    "annotation key carrying code": """from dataclasses import dataclass
def reached():
    name = 'a" + str(' + payload() + ') + "'
    made = dataclass(type("X", (), {U * 2 + "annotations" + U * 2: {name: int}}), init=False,
                     eq=False)
    return repr(made())
""",
    # a Field kept from field() and renamed after use, inherited by a later dataclass
    "kept field renamed then inherited": """from dataclasses import dataclass, field
def reached():
    kept = field(default=0)
    @dataclass
    class Base:
        a: int = kept
    kept.name = 'a" + str(' + payload() + ') + "'
    @dataclass(init=False, eq=False)
    class Child(Base):
        pass
    return repr(Child())
""",
    # fields of the candidate's own making on a class made by type()
    "fields dict of its own": """from dataclasses import fields
class Fake:
    name = "x"
def reached():
    probe = type("P", (), {U * 2 + "dataclass_fields" + U * 2: {"x": Fake()}})
    return fields(probe)
"""}


@pytest.mark.parametrize("route", sorted(ATTACKER_20B))
def test_attacker_20bs_dataclass_routes_pass_the_check_and_score_zero(route):
    code = CodePolicy("routing", U + ATTACKER_20B[route] + ROUTE, id="attacker")
    check(code)  # the static check cannot see names built at run time
    row = run_many(prefix_scenario(), {"attacker": code}, [1], workers=1).iloc[0]
    assert row.fitness == 0 and "TypeError" in row.error and "dataclass" in row.error, row.error
    assert "reached" not in row.log


def test_dataclasses_policies_use_still_work_when_sealed():
    code = CodePolicy("routing", """from dataclasses import asdict, astuple, dataclass, field
from dataclasses import fields, replace

@dataclass(frozen=True)
class Weights:
    load: float
    queue: float = 2.0

@dataclass(frozen=True)
class Tuned(Weights):
    _bias: float = 0.5
    seen: list = field(default_factory=list)
    subject: int = 0  # (the name of the seal's own argument: replace takes it as a field)

class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        w = replace(Tuned(load=1.0), queue=3.0, subject=1)
        w.seen.append(req.id)
        assert asdict(w)["queue"] == 3.0 and astuple(w)[2] == 0.5
        assert [f.name for f in fields(w)] == ["load", "queue", "_bias", "seen", "subject"]
        costs = [w.load * s.batch_size + w.queue * s.queue_depth for s in snapshots]
        best = costs.index(min(costs))
        return RoutingDecision(snapshots[best].id, repr(w)[:40], tuple(-c for c in costs))
""", id="dataclasses")
    check(code)
    row = run_many(prefix_scenario(), {"dataclasses": code}, [1], workers=1).iloc[0]
    assert row.error == "" and row.fitness > 0
