"""`blis-simpy observe` against a local OpenAI-compatible streaming server on loopback: the
client times TTFT, token gaps and E2E as the server paces them, never has more requests in
flight than asked, stops sending at the duration, records failures without stopping, and
writes what `calibrate` and `validate-real` read."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.config.scenario import Scenario
from blis_simpy.observe.client import Endpoint, complete
from blis_simpy.observe.run import drive, measured_set, plan, record
from blis_simpy.validate.importers import Hints, read
from tests.observe.streaming_server import StreamingServer

SCENARIO = {"version": 1, "name": "observe-test",
            "model": {"name": "meta-llama/llama-3.1-8b-instruct", "gpu": "H100", "tp": 1},
            "workload": {"type": "distribution", "num_requests": 24, "rate_per_s": 200,
                         "prompt": {"mean": 64, "stdev": 8, "min": 32, "max": 96},
                         "output": {"mean": 8, "stdev": 2, "min": 4, "max": 12}}}


def observe(server: StreamingServer, concurrency: int, duration: float,
            requests: int | None = None):
    async def main():
        url = await server.start()
        try:
            planned = plan(Scenario.from_dict(SCENARIO), requests)
            return url, planned, await drive(Endpoint.parse(url), "served", planned,
                                             concurrency, duration, grace_s=5)
        finally:
            await server.stop()
    return asyncio.run(main())


def test_timings_follow_the_servers_pace_and_concurrency_is_bounded():
    server = StreamingServer(ttft_s=0.05, itl_s=0.01)
    _, planned, results = observe(server, concurrency=3, duration=30)
    assert len(results) == len(planned) == 24 and server.max_in_flight <= 3
    outcomes = sorted(results, key=lambda o: o.planned.at)
    for o, sent in zip(outcomes, planned, strict=True):
        row = record(o)
        assert "error" not in row
        assert row["output_tokens"] == sent.output_tokens
        assert 50 <= row["ttft_ms"] < 150  # the server's 50 ms, plus the client's turn
        # the gaps the server really kept (its sleeps overshoot on a busy machine)
        written = server.token_times[tuple(o.planned.prompt)]
        kept = (written[-1] - written[0]) / (len(written) - 1) * 1e3
        assert kept >= 10 * 0.99
        assert row["itl_ms_mean"] == pytest.approx(kept, abs=5)
        assert row["e2e_ms"] >= row["ttft_ms"] + 10 * (sent.output_tokens - 1) * 0.99
    body = server.received[0]
    assert body["model"] == "served" and body["stream"] and body["ignore_eos"]
    assert len(body["prompt"]) in {len(p.prompt) for p in planned}


def test_requests_due_after_the_duration_are_not_sent():
    server = StreamingServer(ttft_s=0.01, itl_s=0.002)
    _, planned, results = observe(server, concurrency=4, duration=0.03)
    due = [p for p in planned if p.at < 0.03]
    assert 0 < len(results) <= len(due) < len(planned)


def test_a_failing_server_is_recorded_not_fatal():
    server = StreamingServer(ttft_s=0.01, itl_s=0.002, fail_every=3)
    url, _, results = observe(server, concurrency=2, duration=30, requests=9)
    rows = [record(o) for o in results]
    failed = [r for r in rows if "error" in r]
    assert len(rows) == 9 and len(failed) == 3 and "503" in failed[0]["error"]
    measured = measured_set(Scenario.from_dict(SCENARIO), rows, url, 2, 30)["stages"][0]
    assert measured["measured"]["completed"] == 6 and measured["measured"]["failed"] == 3


@pytest.mark.parametrize("told", [-5, 2.5, "7", True, 10**12])
def test_impossible_server_token_counts_fail_the_request_when_observed(told):
    """newcomer 16's #12: usage.completion_tokens -5 was written as output_tokens -5, a file
    calibrate and validate-real then refused."""
    server = StreamingServer(ttft_s=0.01, itl_s=0.002, usage_tokens=told)
    _, _, results = observe(server, concurrency=2, duration=30, requests=3)
    rows = [record(o) for o in results]
    assert all("usage.completion_tokens is" in r["error"] for r in rows), rows
    assert all("output_tokens" not in r or r["output_tokens"] >= 0 for r in rows)


def test_an_unreachable_server_is_an_error_on_the_request():
    async def main():
        return await complete(Endpoint.parse("http://127.0.0.1:9/v1"), "m", [1, 2], 4, 2.0)
    timing = asyncio.run(main())
    assert timing.error and timing.done is None


def test_the_cli_writes_what_calibrate_reads(tmp_path: Path):
    server = StreamingServer(ttft_s=0.02, itl_s=0.004)
    loop = asyncio.new_event_loop()
    url = loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        scenario = tmp_path / "s.yaml"
        scenario.write_text(json.dumps(SCENARIO))
        result = CliRunner().invoke(app, ["observe", str(scenario), "--url", url, "--out",
                                          str(tmp_path / "obs"), "--concurrency", "4",
                                          "--duration", "20", "--requests", "12"])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "obs" / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 12 and all("ttft_ms" in json.loads(line) for line in lines)
    measured = read(tmp_path / "obs" / "measured.json", Hints())
    stage, = measured.stages
    assert stage.model == SCENARIO["model"]["name"] and stage.measured.completed == 12
    assert stage.measured.stat("ttft", "mean") >= 20
    per_request = read(tmp_path / "obs" / "requests.jsonl",
                       Hints(model="meta-llama/llama-3.1-8b-instruct"))
    assert per_request.stages[0].measured.completed == 12
    # the measured lengths vary (the scenario's gaussian), and both readers of the file run
    assert stage.prompt["type"] == "empirical"
    for command in (["validate-real", str(tmp_path / "obs" / "measured.json")],
                    ["calibrate", str(tmp_path / "obs" / "measured.json"), "--gpu", "H100",
                     "--tp", "1", "--server", "vllm", "--alone",
                     "--out", str(tmp_path / "mine.json")]):
        done = CliRunner().invoke(app, command)
        assert done.exit_code == 0, (command[0], done.output)


def test_a_bad_url_is_one_line_and_exit_2(tmp_path: Path):
    result = CliRunner().invoke(app, ["observe", "quickstart", "--url", "ftp://x"])
    assert result.exit_code == 2 and "--url" in result.stderr


def test_a_server_that_is_not_there_ends_the_observation_at_once(tmp_path: Path):
    """A refused connection before any success is a mistyped --url: one line, exit 2, at the
    first refusal, not after the workload's whole duration (newcomer 19 #9b: 41 s)."""
    import time

    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps({**SCENARIO, "workload": {**SCENARIO["workload"],
                                                             "rate_per_s": 2}}))
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["observe", str(scenario), "--url",
                                      "http://127.0.0.1:9/v1", "--out", str(tmp_path / "obs"),
                                      "--duration", "60"])
    assert result.exit_code == 2, result.output
    assert "--url: the server is not reachable: ConnectionRefusedError" in result.stderr
    assert time.perf_counter() - started < 5  # 24 requests at 2/s would take 12 s
    assert list((tmp_path / "obs").iterdir()) == []  # checked writable, nothing written
