"""The escape suite (issue 29, class 1; docs/security.md): candidates written to break out.

Every attack is a routing candidate that runs arbitrary Python with the real builtins
(`escapes.py`: pattern matching, a route the static check now refuses, as it refuses
`typing.get_type_hints`: test_code's), run with the static check lifted in the evaluator, so
what holds here is the operating system's boundary alone. Each test says what the candidate
tried and what the evaluator still sees: no file, environment variable or network peer
reached, no process left behind, the evaluator untouched, and no score changed but the
candidate's own. The same attacks go through the three ways a search evaluates code:
`run_many`, `blis-simpy gepa-evaluate` and `blis-simpy openevolve-evaluate`.
"""

from __future__ import annotations

import _ctypes
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from blis_simpy.search import jail
from blis_simpy.search.code import CodePolicy, CodeRejected, check
from blis_simpy.search.contain import SHARED, Limits, sandbox
from blis_simpy.search.sweep import run_many
from blis_simpy.search.wire import MAX_LOG
from tests.search import escapes
from tests.search.helpers import prefix_scenario, processes_with
from tests.search.test_code import LEAST_LOADED

ROUTES = ("match",)
SECRET = f"secret-{uuid.uuid4().hex}"
ALWAYS_FIRST = CodePolicy("routing", "class Policy(RoutingPolicy):\n"
                          "    def route(self, req, priority, snapshots, state, clock):\n"
                          + escapes.RETURN, id="first")


def evaluate(*candidates: CodePolicy, limits: Limits | None = None) -> pd.DataFrame:
    """The candidates in one sweep, one after another in this process (one seed)."""
    return run_many(prefix_scenario(), {c.id: c for c in candidates}, [1], workers=1,
                    limits=limits)


def everything(row: pd.Series) -> str:
    return " ".join(str(v) for v in row.to_dict().values())


@pytest.fixture(autouse=True)
def no_static_check() -> Iterator[None]:
    with escapes.unchecked():
        yield


@pytest.fixture(scope="module")
def honest() -> pd.Series:
    """What the escaping candidates would score by their decisions alone (always the first
    instance)."""
    return evaluate(ALWAYS_FIRST).iloc[0]


@pytest.mark.parametrize("route", ROUTES)
def test_each_route_reaches_the_real_builtins_once_past_the_static_check(route, honest):
    """The static check refuses the route; lifted, the payload runs with the real builtins (so
    the tests below test the operating system's boundary, not a broken route), and the
    candidate's own decisions still score as they would without it."""
    code = escapes.escaping(escapes.attempt("builtins", "import os\nresult = os.sep"), route)
    with pytest.raises(CodeRejected, match="pattern attribute"):
        check(code)
    row = evaluate(code).iloc[0]
    assert "builtins: reached '/'" in row.log
    assert row.error == "" and row.fitness == honest.fitness


@pytest.mark.parametrize("route", ROUTES)
def test_escaped_candidate_cannot_read_a_file(tmp_path, route):
    secret = tmp_path / "api-key.txt"
    secret.write_text(SECRET)
    row = evaluate(escapes.escaping(escapes.read_file(str(secret)), route)).iloc[0]
    assert "read-file: PermissionError" in row.log
    assert SECRET not in everything(row)


@pytest.mark.parametrize("route", ROUTES)
def test_escaped_candidate_cannot_read_the_evaluators_environment(monkeypatch, route):
    monkeypatch.setenv("BLIS_TEST_API_KEY", SECRET)
    SHARED.forget()  # a template started while the secret is set
    rows = evaluate(escapes.escaping(escapes.READ_ENV, route), escapes.format_env())
    for row in rows.itertuples():
        assert SECRET not in " ".join(map(str, row))
    reading, formatted = rows.log
    assert "read-env: reached {'PYTHONHASHSEED': '0'" in reading
    assert "read-proc-environ: PermissionError" in reading
    assert "environ({'PYTHONHASHSEED': '0'" in formatted


class Listener:
    """A TCP server on loopback that records whoever connects."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.server.settimeout(0.2)
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                peer, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            peer.close()

    def close(self) -> int:
        self.stop.set()
        self.thread.join()
        self.server.close()
        return self.connections


@pytest.mark.parametrize("route", ROUTES)
def test_escaped_candidate_cannot_reach_the_network(route):
    listener = Listener()
    row = evaluate(escapes.escaping(escapes.connect(listener.port), route)).iloc[0]
    assert listener.close() == 0
    assert "network: PermissionError" in row.log


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (through /proc's children lists)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            found += map(int, children)
            queue += map(int, children)
    return found


@pytest.mark.parametrize("route", ROUTES)
def test_escaped_candidate_leaves_no_process_behind(route):
    marker = f"blis-escape-{uuid.uuid4().hex}"
    row = evaluate(escapes.escaping(escapes.spawn(marker), route)).iloc[0]
    assert "fork: PermissionError" in row.log and "spawn: PermissionError" in row.log
    assert "subprocess: " in row.log and "subprocess: reached" not in row.log
    assert processes_with(marker) == set()
    template = sandbox().process.pid
    assert len(descendants(template)) == 2  # the template (its PID namespace's init), the zygote


@pytest.mark.parametrize("route", ROUTES)
def test_escaped_candidate_cannot_kill_or_touch_the_evaluator(tmp_path, route):
    """Signals go nowhere, files are neither written nor deleted, and the next candidate is
    evaluated as if the attacker had never run."""
    kept = tmp_path / "results.csv"
    kept.write_text("kept")
    attack = escapes.escaping(escapes.KILL + escapes.write_file(str(kept)), route)
    alone = evaluate(CodePolicy("routing", LEAST_LOADED, id="good")).iloc[0]
    rows = evaluate(attack, CodePolicy("routing", LEAST_LOADED, id="good"))
    assert "kill-parent: PermissionError" in rows.log[0]
    assert "kill-all: PermissionError" in rows.log[0]
    assert "write-file: PermissionError" in rows.log[0]
    assert "delete-file: PermissionError" in rows.log[0]
    assert kept.read_text() == "kept"
    after = rows.iloc[1]
    assert (after.error, after.fitness, after.ttft_mean_ms) == ("", alone.fitness,
                                                                alone.ttft_mean_ms)


@pytest.mark.parametrize("route", ROUTES)
def test_forged_replies_score_zero_and_nothing_is_unpickled(tmp_path, route):
    """The attacker writes a routing reply, a row with fitness 1 and a pickle bomb to every
    descriptor it has: the evaluator reads only JSON, finds a reply it did not ask for, and
    scores the candidate 0; the bomb's file never appears."""
    bomb = tmp_path / "unpickled"
    row = evaluate(escapes.escaping(escapes.forge(str(bomb)), route)).iloc[0]
    assert row.fitness == 0
    assert "not JSON" in row.error or "not a reply" in row.error or \
        "not the reply" in row.error
    assert not bomb.exists()


PATCH_EVERYTHING = escapes.attempt("patch", """
import sys
patched = []
for name, module in list(sys.modules.items()):
    if name.startswith("blis_simpy"):
        for attr in list(vars(module)):
            if not attr.startswith("_") and callable(getattr(module, attr)):
                try:
                    setattr(module, attr, None)
                    patched.append(name + "." + attr)
                except Exception:
                    pass
result = len(patched)
""")


def test_a_hostile_candidate_changes_no_score_but_its_own(honest):
    """The run_many attack: a candidate that replaces every function it can find (the
    decision types, the wire, the guard) in its own process. It breaks only its own
    evaluation; a good candidate after it scores as alone, and the attacker's score is not
    what it could have forged (1 or above the good one)."""
    attacker = escapes.escaping(PATCH_EVERYTHING, "match", name="attacker")
    good = CodePolicy("routing", LEAST_LOADED, id="good")
    alone = evaluate(good).iloc[0]
    rows = evaluate(attacker, good, ALWAYS_FIRST)
    attacked, after, first = rows.iloc[0], rows.iloc[1], rows.iloc[2]
    assert attacked.fitness in (0.0, honest.fitness) and attacked.fitness < alone.fitness
    assert (after.fitness, after.ttft_mean_ms, after.error) == (alone.fitness,
                                                                alone.ttft_mean_ms, "")
    assert (first.fitness, first.error) == (honest.fitness, "")


def test_candidates_never_see_each_other():
    """A candidate's process is forked from a template that never saw another candidate: the
    source of one evaluated just before is nowhere in the next one's memory."""
    marker = f"marker-{uuid.uuid4().hex}"
    first = CodePolicy("routing", f"KEY = {marker!r}\n" + ALWAYS_FIRST.source, id="a")
    scan = escapes.attempt("scan", f"""
import gc
needle = {marker[:20]!r} + {marker[20:]!r}
def holds(o):
    items = [*o.keys(), *o.values()] if isinstance(o, dict) else o \\
        if isinstance(o, (list, tuple)) else ()
    return any(isinstance(i, str) and i is not needle and needle in i for i in items)
result = sum(1 for o in gc.get_objects() if holds(o))
""")
    rows = evaluate(first, escapes.escaping(scan, "match", name="b"))
    assert "scan: reached 0" in rows.log[1]


def test_pid_entropy_and_signal_handlers_are_out_of_reach():
    """What an escaped candidate could use to vary its own score: process ids, entropy and
    signal handlers (to outlive the CPU limit) are refused."""
    row = evaluate(escapes.escaping(escapes.PROBES)).iloc[0]
    for probe in ("entropy", "signal-handler"):
        assert f"{probe}: PermissionError" in row.log or f"{probe}: OSError" in row.log
    assert "pid: reached -1" in row.log


def test_every_clock_an_escaped_candidate_reads_is_stopped():
    """Before candidate code runs, the pages of clock data the vDSO reads are zeros:
    `time.time()`, the monotonic clock, sleeping and the CPU clock fail (the kernel is asked;
    the filter refuses), a coarse clock reads 0. libc's `time()` and the rdtsc instruction
    need ctypes, which the candidate's process does not have. (In a pure install, whose
    lock-down goes through ctypes, libc's `time()` reads 0 and rdtsc, in machine code of the
    candidate's own, still reads the counter: docs/security.md, what it does not
    guarantee.)"""
    candidates = [escapes.escaping(escapes.attempt(name, code), name=name)
                  for name, code in escapes.CLOCKS.items()]
    rows = {row.policy: row for row in evaluate(*candidates).itertuples()}
    for name in ("time", "monotonic", "sleep"):
        assert f"{name}: PermissionError" in rows[name].log, rows[name].log
    assert "coarse: reached 0" in rows["coarse"].log, rows["coarse"].log
    assert "reached" not in rows["cpu-time"].log or "reached -" in rows["cpu-time"].log
    if not jail.PURE:
        for name in ("libc-time", "rdtsc"):
            assert f"{name}: ModuleNotFoundError import of ctypes halted" in rows[name].log
    else:
        assert "libc-time: reached 0" in rows["libc-time"].log, rows["libc-time"].log
        if platform.machine() == "x86_64":
            assert "rdtsc: reached" in rows["rdtsc"].log
    assert {r.error for r in rows.values()} == {""}


@pytest.mark.skipif(jail.PURE, reason="a pure install locks down through ctypes "
                    "(no blis_simpy.search.lockdown extension: docs/security.md)")
def test_an_escaped_candidate_has_no_ctypes_and_cannot_load_it():
    """The lock-down's native calls are the C extension's (`blis_simpy.search.lockdown`), and
    the template withholds ctypes before numpy looks for it: an escaped candidate finds
    ctypes and _ctypes refused in `sys.modules`, and with those entries removed, loading them
    from disk fails (the filter refuses open: dlopen of _ctypes' own file says so). Neither
    library is mapped in the template, whose forks the candidates' processes are (and they
    can load nothing after)."""
    payload = "".join(escapes.attempt(f"{how}-{name}", code.format(name=name))
                      for name in ("ctypes", "_ctypes") for how, code in (
                          ("held", "import sys\nresult = sys.modules['{name}']"),
                          ("import", "import {name}\nresult = {name}"),
                          ("from-disk", "import sys\ndel sys.modules['{name}']\n"
                                        "import {name}\nresult = {name}"))) + escapes.attempt(
        "dlopen", "import importlib.util\nspec = importlib.util.spec_from_file_location("
        f"'_ctypes', {_ctypes.__file__!r})\nresult = importlib.util.module_from_spec(spec)")
    before = processes_with("blis_simpy.search.cell")
    row = evaluate(escapes.escaping(payload, name="ctypes")).iloc[0]
    for name in ("ctypes", "_ctypes"):
        assert f"held-{name}: reached None" in row.log, row.log
        assert f"import-{name}: ModuleNotFoundError import of {name} halted" in row.log
        assert f"from-disk-{name}: ModuleNotFoundError No module named {name!r}" in row.log
    assert "cannot open shared object file: Operation not permitted" in row.log, row.log
    templates = {pid: Path(f"/proc/{pid}/maps").read_text()
                 for pid in processes_with("blis_simpy.search.cell") | before
                 if Path(f"/proc/{pid}/maps").exists()}
    assert any("/lockdown.cpython" in maps for maps in templates.values()), templates.keys()
    assert not any("_ctypes" in maps for maps in templates.values())


NEWCOMER_19 = {  # their two routes to the clock (newcomer 19's note, finding 1), as written
    "singledispatch": """import functools


class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        class H:
            a: "float(" + "_" + "_import_" + "_('time').time())"

        now = 0.0
        try:
            functools.singledispatch(len).register(H())
        except TypeError as e:
            now = float(str(e).split(". ", 1)[1].split(" ")[0])
        print(now)
        s = snapshots[int(now * 1e6) % len(snapshots)]
        return RoutingDecision(s.id, "clock", tuple(0.0 for _ in snapshots))
""",
    "update_wrapper": """import dataclasses
import functools


class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        u = "_" + "_"
        name = u + "globals" + u
        Holder = dataclasses.make_dataclass("Holder", [(name, object)])
        holder = Holder(None)
        functools.update_wrapper(holder, functools.update_wrapper, assigned=(name,),
                                 updated=())
        now = 0.0
        match holder:
            case Holder(found):
                builtin = found[u + "builtins" + u]
                now = builtin[u + "import" + u]("time").time()
        print(now)
        s = snapshots[int(now * 1e6) % len(snapshots)]
        return RoutingDecision(s.id, "wrap", tuple(0.0 for _ in snapshots))
"""}


# The same two mechanisms with the real modules (as a candidate that escaped by another
# route would have them): each reads the clock.
NEWCOMER_19_REAL = {
    "singledispatch": "import functools\nclass H:\n    a: 'float(__import__(\"time\").time())'\n"
                      "functools.singledispatch(len).register(H())\nresult = 'no clock'",
    "update_wrapper": "import dataclasses, functools\nname = '__globals__'\n"
                      "Holder = dataclasses.make_dataclass('Holder', [(name, object)])\n"
                      "holder = Holder(None)\nfunctools.update_wrapper(holder, "
                      "functools.update_wrapper, assigned=(name,), updated=())\n"
                      "match holder:\n    case Holder(found):\n"
                      "        result = found['__builtins__']['__import__']('time').time()"}


@pytest.mark.parametrize("route", sorted(NEWCOMER_19))
def test_newcomer_19s_clock_candidates_score_the_same_every_run(route):
    """Newcomer 19's routes scored 0.67-1.15 from run to run (the wall clock picked the
    instance). As written (the static check, which refuses both now, lifted), the module views
    do not offer their helpers: the same zero, saying so. With the real modules, their clock
    read fails (PermissionError): the same score every run."""
    plain = [evaluate(CodePolicy("routing", NEWCOMER_19[route], id=route)).iloc[0]
             for _ in range(2)]
    assert plain[0].fitness == plain[1].fitness == 0
    assert "has no attribute" in plain[0].error and plain[0].error == plain[1].error
    real = escapes.escaping(escapes.attempt(route, NEWCOMER_19_REAL[route]), name=route)
    rows = [evaluate(real).iloc[0] for _ in range(2)]
    assert f"{route}: " in rows[0].log and "reached" not in rows[0].log, rows[0].log
    assert rows[0].fitness == rows[1].fitness and rows[0].log == rows[1].log


def test_blocking_forever_ends_at_the_wall_budget():
    """A candidate that waits on its own socket (the evaluator waits for it in turn) is killed
    at the wall-time budget."""
    block = escapes.attempt("block", "import os\nresult = []\nfor fd in range(3, 64):\n"
                            "    try:\n        result.append(os.read(fd, 1))\n"
                            "    except OSError:\n        pass")
    row = evaluate(escapes.escaping(block), limits=Limits(wall_s=2)).iloc[0]
    assert row.fitness == 0 and "exceeded its wall-time budget of 2 s" in row.error


def test_output_floods_and_oversized_replies_are_bounded():
    flood = CodePolicy("routing", "class Policy(RoutingPolicy):\n"
                       "    def route(self, req, priority, snapshots, state, clock):\n"
                       "        print('x' * 10 ** 6)\n" + escapes.RETURN, id="flood")
    huge = CodePolicy("routing", "class Policy(RoutingPolicy):\n"
                      "    def route(self, req, priority, snapshots, state, clock):\n"
                      "        return RoutingDecision(snapshots[0].id, 'x' * 2 ** 21, "
                      "(1.0, 1.0))\n", id="huge")
    flooded, oversized = evaluate(flood, huge).itertuples()
    assert flooded.error == "" and len(flooded.log) < MAX_LOG + 100
    assert "more characters not kept" in flooded.log
    assert oversized.fitness == 0 and "more than 1048576 bytes" in oversized.error


def test_an_escaped_candidates_log_is_bounded_by_the_evaluator():
    """newcomer 17's #6: an escaped candidate replaced the cell's bounded log and its row
    carried 900,054 characters; the evaluator cuts what no cell would send."""
    payload = escapes.attempt("biglog", 'import sys\n'
                              'sys.modules["__main__"].BoundedLog.text = '
                              'lambda self: "A" * 900000\nresult = "patched"')
    [row] = evaluate(escapes.escaping(payload, name="biglog")).itertuples()
    assert len(row.log) < MAX_LOG + 100 and "cut by the evaluator" in row.log


# --- the same attacks through the command line ---------------------------------------------

def omnibus(tmp_path: Path, port: int, marker: str) -> str:
    """Every attack in one payload, which then routes honestly."""
    secret = tmp_path / "api-key.txt"
    secret.write_text(SECRET)
    return (escapes.read_file(str(secret)) + escapes.READ_ENV + escapes.connect(port)
            + escapes.spawn(marker) + escapes.KILL + escapes.write_file(str(secret))
            + escapes.PROBES)


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", escapes.UNCHECKED, *args], capture_output=True,
                          text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("workload") / "w.yaml"
    path.write_text(yaml.safe_dump(prefix_scenario().to_dict()))
    return path


@pytest.mark.parametrize("command", ["gepa-evaluate", "openevolve-evaluate"])
@pytest.mark.parametrize("forging", [False, True], ids=["reads", "forges"])
def test_escape_suite_through_the_command_line(tmp_path, workload, command, forging):
    """The attacks through the commands a search calls: the evaluator prints its JSON (and
    nothing else) on stdout, holds no secret, got no connection, leaves no process; the
    attacker that also forges scores 0, the one that does not scores its own decisions."""
    listener = Listener()
    marker = f"blis-escape-{uuid.uuid4().hex}"
    sandboxes = processes_with("blis_simpy.search.cell")  # this process's own template
    payload = omnibus(tmp_path, listener.port, marker)
    if forging:
        payload += escapes.forge(str(tmp_path / "unpickled"))
    program = tmp_path / "candidate.py"
    program.write_text(escapes.escaping(payload).source)
    env = {**os.environ, "BLIS_TEST_API_KEY": SECRET}
    if command == "gepa-evaluate":
        done = cli(command, "--workload", str(workload), "--seed", "1", "--code",
                   f"routing={program}", env=env)
    else:
        done = cli(command, str(program), "--workload", str(workload), "--seed", "1", env=env)
    assert listener.close() == 0
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # stdout is the report, uncorrupted
    assert SECRET not in done.stdout + done.stderr
    assert processes_with(marker) == set()
    assert processes_with("blis_simpy.search.cell") == sandboxes  # the command's sandbox too
    assert not (tmp_path / "unpickled").exists()
    assert (tmp_path / "api-key.txt").read_text() == SECRET
    score = report["score"] if command == "gepa-evaluate" else \
        report["metrics"]["combined_score"]
    honest = run_many(prefix_scenario(), {"first": ALWAYS_FIRST}, [1], workers=1).iloc[0]
    assert score == (0.0 if forging else pytest.approx(honest.fitness))
    if not forging:
        log = report["runs"][0]["log"] if command == "gepa-evaluate" else \
            report["artifacts"]["log"]
        assert "read-file: PermissionError" in log and "network: PermissionError" in log
