"""The LLM client's HTTP (openai SDK on the aiohttp transport) against providers that misbehave
at the HTTP level: each failure must read as what it is, and a compressed answer must be read."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from bot.llm.client import LLMClient
from memory.llm import LLMError
from tests.rigs.fakes.local_server import serve_locally
from tests.rigs.fakes.openai_server import completion
from tests.rigs.fakes.tls import self_signed

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def provider() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """Serves one handler as /v1/chat/completions; gives its base URL."""
    runners: list[web.AppRunner] = []

    async def serve(handler: Handler) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner, port = await serve_locally(app)
        runners.append(runner)
        return f"http://127.0.0.1:{port}/v1"

    yield serve
    for runner in runners:
        await runner.cleanup()


async def ask(base_url: str, timeout_s: float = 5.0) -> str | None:
    client = LLMClient(model="m", base_url=base_url, timeout_s=timeout_s, max_retries=0)
    try:
        result = await client.chat([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
    return result.content


async def test_a_gzip_compressed_answer_is_read(provider) -> None:
    async def gzipped(request: web.Request) -> web.Response:
        await request.read()
        body = gzip.compress(json.dumps(completion("hello from gzip")).encode())
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        return web.Response(body=body, headers=headers)

    assert await ask(await provider(gzipped)) == "hello from gzip"


async def test_a_gzip_compressed_stream_is_read(provider) -> None:
    async def gzipped(request: web.Request) -> web.Response:
        await request.read()
        chunks = [
            {"choices": [{"index": 0, "delta": {"content": word}}]} for word in ("Hi", " there")
        ]
        events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
        headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
        return web.Response(body=gzip.compress(events.encode()), headers=headers)

    client = LLMClient(model="m", base_url=await provider(gzipped), max_retries=0)
    pieces: list[str] = []

    async def shown(piece: str) -> None:
        pieces.append(piece)

    try:
        result = await client.stream([{"role": "user", "content": "hi"}], on_text=shown)
    finally:
        await client.aclose()
    assert result.content == "".join(pieces) == "Hi there"


async def test_the_provider_is_not_told_about_the_machine(provider) -> None:
    """The SDK's telemetry headers (OS, CPU, Python version) are not sent: a provider needs
    none of them, and each was work on every request."""
    seen: list[dict[str, str]] = []

    async def recording(request: web.Request) -> web.Response:
        await request.read()
        seen.append(dict(request.headers))
        return web.json_response(completion("ok"))

    assert await ask(await provider(recording)) == "ok"
    names = {name.lower() for name in seen[0]}
    assert "authorization" in names and "content-type" in names
    gone = {"x-stainless-os", "x-stainless-arch", "x-stainless-runtime-version", "x-stainless-lang"}
    assert not names & gone


async def test_the_provider_gets_the_request_the_sdk_writes(provider) -> None:
    """Whole or streamed, a chat request reaches the provider as the SDK writes one: its
    headers (the SDK's over httpx2's, the SDK's own name as the user agent), and the body as
    compact UTF-8 JSON."""
    seen: list[tuple[dict[str, str], bytes]] = []

    async def recording(request: web.Request) -> web.StreamResponse:
        headers = {name.lower(): value for name, value in request.headers.items()}
        seen.append((headers, await request.read()))
        if (await request.json()).get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            chunk = {"choices": [{"index": 0, "delta": {"content": "ok"}}]}
            await response.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
            return response
        return web.json_response(completion("ok"))

    llm = LLMClient(model="m", base_url=await provider(recording), api_key="sk-test", timeout_s=5)
    messages = [{"role": "user", "content": 'thé, "quoted"'}]

    async def ignore(text: str) -> None:
        pass

    try:
        assert (await llm.chat(messages)).content == "ok"
        assert (await llm.stream(messages, on_text=ignore)).content == "ok"
    finally:
        await llm.aclose()
    for (headers, body), stream in zip(seen, (False, True), strict=True):
        assert headers["user-agent"].startswith("AsyncOpenAI/Python ")
        assert headers["accept"] == "application/json"
        assert headers["content-type"] == "application/json"
        assert headers["authorization"] == "Bearer sk-test"
        assert headers["x-stainless-retry-count"] == "0"
        assert headers["accept-encoding"].startswith("gzip")
        assert headers["content-length"] == str(len(body))
        assert body.startswith(b'{"model":"m","messages":[{"role":"user","content":"th\xc3\xa9')
        assert json.loads(body)["messages"] == messages
        assert json.loads(body).get("stream", False) is stream


async def test_each_attempt_says_which_it_is_and_carries_its_own_body(provider) -> None:
    """A request is built once per attempt number and then reused with a new body: a retry
    still says it is one, and every attempt and every later request carries its own body."""
    seen: list[tuple[str, bytes]] = []

    async def failing_every_other(request: web.Request) -> web.Response:
        seen.append((request.headers["x-stainless-retry-count"], await request.read()))
        if len(seen) % 2:
            return web.json_response({"error": {"message": "busy"}}, status=503)
        return web.json_response(completion("ok"))

    llm = LLMClient(model="m", base_url=await provider(failing_every_other), timeout_s=5)
    llm._client._calculate_retry_timeout = lambda *args: 0.0  # no back-off pauses in a test
    try:
        for word in ("one", "two", "three"):
            assert (await llm.chat([{"role": "user", "content": word}])).content == "ok"
    finally:
        await llm.aclose()
    counts = [count for count, _ in seen]
    words = [json.loads(body)["messages"][0]["content"] for _, body in seen]
    assert counts == ["0", "1"] * 3
    assert words == ["one", "one", "two", "two", "three", "three"]


async def test_a_cookie_the_provider_sets_is_sent_back(provider) -> None:
    """A provider behind a proxy that pins a session by cookie (Cloudflare's __cf_bm) gets it
    back on the next request, as httpx2 does it for the SDK."""
    cookies: list[str | None] = []

    async def pinning(request: web.Request) -> web.Response:
        await request.read()
        cookies.append(request.headers.get("Cookie"))
        response = web.json_response(completion("ok"))
        response.set_cookie("__cf_bm", f"pin{len(cookies)}")
        return response

    llm = LLMClient(model="m", base_url=await provider(pinning), timeout_s=5)
    try:
        for _ in range(3):
            await llm.chat([{"role": "user", "content": "hi"}])
    finally:
        await llm.aclose()
    assert cookies == [None, "__cf_bm=pin1", "__cf_bm=pin2"]


async def test_a_provider_that_hangs_up_could_not_be_reached(provider) -> None:
    async def hang_up(request: web.Request) -> web.Response:
        await request.read()
        assert request.transport is not None
        request.transport.close()  # no status line at all
        await asyncio.sleep(1)
        return web.Response()

    with pytest.raises(LLMError, match="could not be reached"):
        await ask(await provider(hang_up))


async def test_a_provider_that_never_answers_timed_out(provider) -> None:
    async def silent(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response()

    with pytest.raises(LLMError, match="timed out"):
        await ask(await provider(silent), timeout_s=0.3)


async def test_https_trusts_the_certificates_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, server_context = self_signed(tmp_path)

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(completion("over tls"))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner, port = await serve_locally(app, server_context)
    try:
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert await ask(f"https://127.0.0.1:{port}/v1") == "over tls"
        (tmp_path / "other").mkdir()
        other, _ = self_signed(tmp_path / "other")  # a certificate of someone else
        monkeypatch.setenv("SSL_CERT_FILE", str(other))
        with pytest.raises(LLMError, match="could not be reached"):
            await ask(f"https://127.0.0.1:{port}/v1")
    finally:
        await runner.cleanup()
