"""A streaming client for OpenAI-compatible completion endpoints (vLLM, SGLang, TGI, ...),
on asyncio streams alone: one HTTP/1.1 POST per request, the server-sent events read as they
arrive, the time of every token chunk taken on the client's monotonic clock.

The prompt is sent as token ids (`prompt: [ids]`, which vLLM and SGLang accept), so it is
exactly as long as the scenario says without a tokenizer here; `ignore_eos` asks for exactly
`max_tokens` tokens; `stream_options.include_usage` asks for the server's own token counts.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

CONNECT_TIMEOUT_S = 10.0


@dataclass(slots=True)
class Timing:
    """One request as the client saw it (seconds on the monotonic clock, from its send)."""
    sent: float
    first_token: float | None = None
    done: float | None = None
    chunks: list[float] = field(default_factory=list)  # arrival of every content chunk
    output_tokens: int = 0  # the server's count (usage), else the chunks seen
    error: str = ""


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    path: str
    tls: bool
    api_key: str | None = None

    @classmethod
    def parse(cls, url: str, api_key: str | None = None) -> Endpoint:
        """`http(s)://host[:port]/v1` (or the whole `.../completions` path)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http(s):// URL of the server, got {url!r}")
        path = parts.path.rstrip("/") or "/v1"
        if not path.endswith("/completions"):
            path += "/completions"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.hostname, port, path, parts.scheme == "https", api_key)


async def complete(endpoint: Endpoint, model: str, prompt: list[int], max_tokens: int,
                   timeout_s: float) -> Timing:
    """Send one streaming completion and time it; errors are recorded, never raised."""
    timing = Timing(sent=time.perf_counter())
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True, "temperature": 0.0,
                       "stream_options": {"include_usage": True}}).encode()
    try:
        await asyncio.wait_for(_exchange(endpoint, body, timing), timeout_s)
    except TimeoutError:
        timing.error = f"no complete response within {timeout_s:g} s"
    except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
        timing.error = f"{type(exc).__name__}: {exc}"
    if timing.error:
        timing.done = None
    return timing


async def _exchange(endpoint: Endpoint, body: bytes, timing: Timing) -> None:
    context = ssl.create_default_context() if endpoint.tls else None
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(endpoint.host, endpoint.port, ssl=context), CONNECT_TIMEOUT_S)
    try:
        headers = [f"POST {endpoint.path} HTTP/1.1", f"Host: {endpoint.host}",
                   "Content-Type: application/json", "Accept: text/event-stream",
                   f"Content-Length: {len(body)}", "Connection: close"]
        if endpoint.api_key:
            headers.append(f"Authorization: Bearer {endpoint.api_key}")
        writer.write(("\r\n".join(headers) + "\r\n\r\n").encode() + body)
        await writer.drain()
        status = (await reader.readline()).decode("latin-1").split(" ", 2)
        if len(status) < 2 or status[1] != "200":
            raise ValueError(f"HTTP status {' '.join(status[1:]).strip() or 'missing'}")
        chunked = False
        while True:
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                break
            name, _, value = line.partition(":")
            if name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        await _events(_body(reader, chunked), timing)
    finally:
        writer.close()


async def _body(reader: asyncio.StreamReader, chunked: bool):  # type: ignore[no-untyped-def]
    """The response body's lines, decoding chunked transfer encoding."""
    if not chunked:
        while line := await reader.readline():
            yield line
        return
    pending = b""
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return
        pending += await reader.readexactly(size)
        await reader.readline()  # the CRLF after the chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line + b"\n"


MAX_COUNT = 10**9  # tokens: more than any context a server holds


def server_count(value: object) -> int:
    """The server's usage.completion_tokens, checked where it is observed: a count that cannot
    be (negative, fractional, not a number, beyond any context) fails the request, so the
    files written hold only numbers calibrate and validate-real read."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"server error: usage.completion_tokens is {str(value)[:40]!r}, "
                         f"not a whole number of tokens from 0 to {MAX_COUNT:,}")
    return value


async def _events(lines, timing: Timing) -> None:  # type: ignore[no-untyped-def]
    async for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        now = time.perf_counter()
        event = json.loads(payload)
        if "error" in event:
            raise ValueError(f"server error: {event['error']}")
        usage = event.get("usage")
        if isinstance(usage, dict) and "completion_tokens" in usage:
            timing.output_tokens = server_count(usage["completion_tokens"])
        choices = event.get("choices") or []
        if any(c.get("text") for c in choices if isinstance(c, dict)):
            if timing.first_token is None:
                timing.first_token = now
            timing.chunks.append(now)
    timing.done = time.perf_counter()
    if timing.first_token is None:
        raise ValueError("the stream ended without a token")
    if not timing.output_tokens:
        timing.output_tokens = len(timing.chunks)
