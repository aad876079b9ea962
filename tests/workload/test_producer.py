"""The workload producer (workload/producer.py): a distribution workload drawn and hashed in a
forked process gives the same requests, field for field, and the same output files as the
in-process source; its failures surface in the parent; no process is left behind."""

from __future__ import annotations

import filecmp
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from blis_simpy.config.resolve import resolve
from blis_simpy.core.hashing import block_keys
from blis_simpy.workload import producer
from blis_simpy.workload.producer import Producer, ProducerError, wanted
from blis_simpy.workload.source import requests_of
from tests.conftest import scenario

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, Linux")

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("index", "name", "arrival", "input_len", "output_len", "prefill_target",
          "max_tokens", "hashes", "tokens", "hashed", "tenant_id", "slo_class",
          "request_type", "adapter", "session_id", "turn", "model", "trace_time", "deadline")


def fields(requests):
    return [tuple(getattr(r, name) for name in FIELDS) for r in requests]


def small(compat: bool, prefix: int = 0, **changes):
    workload = {"num_requests": 400, "rate_per_s": 10, "prefix_tokens": prefix,
                "prompt": {"mean": 40, "stdev": 30, "min": 1, "max": 200},
                "output": {"mean": 20, "stdev": 15, "min": 1, "max": 100}}
    return resolve(scenario(workload=workload, **({"compat": "blis"} if compat else {}),
                            **changes))


def reaped(pid: int) -> bool:
    """The process is gone and reaped (not ours any more, nor a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return not Path(f"/proc/{pid}").exists() or state(pid) != "Z"
    return False


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


@pytest.mark.parametrize(("compat", "prefix", "horizon"),
                         [(True, 0, None), (True, 37, None), (False, 0, None),
                          (False, 5, None), (True, 0, 20.0), (False, 0, 20.0)])
def test_produced_requests_equal_the_in_process_source(monkeypatch, compat, prefix, horizon):
    """Across chunks (small ones here), with and without a shared prefix, sequences under one
    block, and a horizon that cuts the workload."""
    monkeypatch.setattr(producer, "CHUNK_TOKENS", 1000)
    s = small(compat, prefix, **({"horizon_s": horizon} if horizon else {}))
    plain = list(requests_of(s, reference_draws=compat).requests)
    made = Producer(s, compat)
    pid = made.pid
    produced = list(made.requests())
    assert fields(produced) == fields(plain)
    assert [list(r.keys) for r in produced] == [list(block_keys(r.hashes)) for r in plain]
    assert reaped(pid) and not producer.LIVE
    assert any(r.hashes for r in plain) and (prefix or any(not r.hashes for r in plain))
    assert horizon is None or len(plain) < 400


def test_a_producer_error_is_raised_in_the_parent(monkeypatch):
    """The producer's own exception, with its traceback as a note; never a short workload."""
    real = producer.drawn

    def failing(s, reference_draws):
        for i, item in enumerate(real(s, reference_draws)):
            if i == 150:
                raise ValueError("bad draw")
            yield item

    monkeypatch.setattr(producer, "CHUNK_TOKENS", 1000)
    monkeypatch.setattr(producer, "drawn", failing)
    made = Producer(small(True), True)
    pid = made.pid
    got = []
    with pytest.raises(ValueError, match="bad draw") as raised:
        got.extend(made.requests())
    assert "in the workload producer process (exit status 1)" in raised.value.__notes__[0]
    assert "failing" in raised.value.__notes__[0]  # its traceback
    assert len(got) < 150 and reaped(pid) and not producer.LIVE


def test_a_killed_producer_is_an_error_not_a_short_workload(monkeypatch):
    real = producer.drawn

    def killed(s, reference_draws):
        for i, item in enumerate(real(s, reference_draws)):
            if i == 150:
                os.kill(os.getpid(), signal.SIGKILL)
            yield item

    monkeypatch.setattr(producer, "CHUNK_TOKENS", 1000)
    monkeypatch.setattr(producer, "drawn", killed)
    made = Producer(small(False), False)
    pid = made.pid
    with pytest.raises(ProducerError, match=r"ended before its last request: killed by "
                                            r"signal 9 \(SIGKILL\)"):
        list(made.requests())
    assert reaped(pid) and not producer.LIVE


def test_a_producer_no_longer_read_is_stopped_and_reaped():
    """A run that ends before its workload (or a generator dropped) stops the producer; so
    does `stop` before anything was read."""
    s = resolve(scenario(compat="blis", workload={"num_requests": 50_000, "rate_per_s": 10}))
    made = Producer(s, True)
    pid = made.pid
    ahead = made.requests()
    assert next(ahead).index == 0
    ahead.close()
    assert reaped(pid) and not producer.LIVE
    unread = Producer(s, True)
    pid = unread.pid
    unread.stopped()
    unread.stopped()
    assert reaped(pid) and not producer.LIVE
    dropped = Producer(s, True)  # never read nor stopped: reaped when collected
    pid = dropped.pid
    del dropped
    gc.collect()
    assert reaped(pid) and not producer.LIVE


def test_without_a_fork_the_workload_is_drawn_in_process(monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setenv(producer.ENV, "1")
    monkeypatch.setattr(os, "fork", no_fork)
    from blis_simpy.api import run

    assert run(small(True)).summary["completed_requests"] == 400


def test_used_only_when_it_pays(monkeypatch):
    monkeypatch.delenv(producer.ENV, raising=False)
    # (earlier tests of the suite may leave a thread of their own alive: the gating under test
    # here sees only this one, until the test starts another below)
    real_count = threading.active_count
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert wanted(producer.THRESHOLD) and not wanted(producer.THRESHOLD - 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1})  # e.g. a pinned session
    assert not wanted(10 * producer.THRESHOLD)
    monkeypatch.setenv(producer.ENV, "1")  # forced on: whatever the size and CPUs
    assert wanted(1)
    monkeypatch.setenv(producer.ENV, "0")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert not wanted(10 * producer.THRESHOLD)
    monkeypatch.setenv(producer.ENV, "1")
    monkeypatch.setattr(threading, "active_count", real_count)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not wanted(10 * producer.THRESHOLD)  # another thread: no fork
    finally:
        stop.set()
        other.join()


def test_a_prepared_workload_never_forks(monkeypatch):
    """A policy search's prepared workload is drawn once, in process."""
    from blis_simpy.sim.build import build
    from blis_simpy.sim.run import simulate
    from blis_simpy.workload import prepared

    monkeypatch.setenv(producer.ENV, "1")
    monkeypatch.setattr(producer, "Producer", None)  # calling it would fail
    s = small(True)
    made = prepared.prepare(s, reference_draws=True)
    assert made is not None and len(made.requests) == 400
    assert simulate(build(s, prepared=made)).summary["completed_requests"] == 400


CASES = ["blis_simpy/scenarios/bench/1k-1inst.yaml"]


def cli_run(case: str, out: Path, setting: str, *extra: str) -> None:
    env = {**os.environ, producer.ENV: setting}
    subprocess.run([sys.executable, "-m", "blis_simpy.cli", "run", case, "--out", str(out),
                    "--quiet", *extra], cwd=ROOT, env=env, check=True)


@pytest.mark.parametrize("native", [False, True])
def test_the_same_files_with_the_producer_on_and_off(tmp_path, native):
    extra = ["--set", "compat=none"] if native else []
    case = CASES[0]
    cli_run(case, tmp_path / "on", "1", *extra)
    cli_run(case, tmp_path / "off", "0", *extra)
    names = sorted(p.name for p in (tmp_path / "on").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "off").iterdir()) and names
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "on", tmp_path / "off", names,
                                               shallow=False)
    assert not mismatch and not errors, mismatch


PARENT = textwrap.dedent("""
    import sys, time
    from blis_simpy.config.resolve import resolve
    from blis_simpy.workload.producer import Producer
    from tests.conftest import scenario
    s = resolve(scenario(compat="blis", workload={"num_requests": 1_000_000,
                                                  "rate_per_s": 10}))
    made = Producer(s, True)
    print(made.pid, flush=True)
    for req in made.requests():
        time.sleep(0.01)  # a slow consumer: the producer is blocked on its pipe
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_process_left_when_the_parent_is_signalled(sig):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    time.sleep(0.5)
    assert state(child) in ("S", "R")
    parent.send_signal(sig)
    parent.wait(timeout=20)
    for _ in range(100):  # a SIGKILLed parent's child dies by its death signal
        if state(child) in ("", "Z"):
            break
        time.sleep(0.05)
    assert state(child) in ("", "Z") if sig == signal.SIGKILL else state(child) == ""


def test_an_unknown_setting_of_the_switch_is_refused_by_name(monkeypatch, tmp_path):
    """newcomer 17's #10: BLIS_SIMPY_PRODUCER=maybe was read as unset."""
    from blis_simpy.core.errors import ScenarioError

    monkeypatch.setenv(producer.ENV, "maybe")
    with pytest.raises(ScenarioError, match="BLIS_SIMPY_PRODUCER: 'maybe' is not a setting"):
        wanted(100_000)
    done = subprocess.run([sys.executable, "-m", "blis_simpy", "run", "quickstart", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True,
                          env={**os.environ, producer.ENV: "maybe"}, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "BLIS_SIMPY_PRODUCER" in done.stderr and not (tmp_path / "out").exists()
