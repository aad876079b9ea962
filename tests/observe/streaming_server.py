"""A local OpenAI-compatible streaming server for the observe tests: /v1/completions answers
with server-sent events in chunked transfer encoding, the first token after `ttft_s` (plus
`per_prompt_token_s` per prompt token), then one token every `itl_s`, `max_tokens` in all,
a usage chunk and [DONE]. It counts the requests in flight, so a test can check the client's
concurrency bound, keeps when it wrote each token (by prompt), so a test can compare the
client's timings with the pace the server really kept on a busy machine, and can fail every
n-th request."""

from __future__ import annotations

import asyncio
import json
import time


class StreamingServer:
    def __init__(self, ttft_s: float = 0.02, itl_s: float = 0.005,
                 per_prompt_token_s: float = 0.0, fail_every: int = 0,
                 usage_tokens: object = None) -> None:
        self.ttft_s, self.itl_s, self.per_token = ttft_s, itl_s, per_prompt_token_s
        self.usage_tokens = usage_tokens  # what usage.completion_tokens says (None: the truth)
        self.fail_every = fail_every
        self.in_flight = 0
        self.max_in_flight = 0
        self.received: list[dict] = []
        self.token_times: dict[tuple[int, ...], list[float]] = {}  # perf_counter, by prompt
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            request_line = (await reader.readline()).decode()
            length = 0
            while (line := (await reader.readline()).decode().strip()):
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length))
            self.received.append(body)
            if "/completions" not in request_line:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                return
            if self.fail_every and len(self.received) % self.fail_every == 0:
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            await asyncio.sleep(self.ttft_s + self.per_token * len(body["prompt"]))
            written = self.token_times.setdefault(tuple(body["prompt"]), [])
            for i in range(body["max_tokens"]):
                if i:
                    await asyncio.sleep(self.itl_s)
                written.append(time.perf_counter())
                self.send(writer, {"choices": [{"index": 0, "text": f" t{i}"}]})
                await writer.drain()
            told = body["max_tokens"] if self.usage_tokens is None else self.usage_tokens
            self.send(writer, {"choices": [], "usage": {"completion_tokens": told,
                                                         "prompt_tokens": len(body["prompt"])}})
            writer.write(self.chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        finally:
            self.in_flight -= 1
            writer.close()

    def send(self, writer: asyncio.StreamWriter, event: dict) -> None:
        writer.write(self.chunk(f"data: {json.dumps(event)}\n\n".encode()))

    @staticmethod
    def chunk(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"
