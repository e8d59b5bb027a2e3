"""A small OpenAI-compatible embeddings server on 127.0.0.1 for tests: the far end, never our code.

`POST /v1/embeddings` takes what the openai SDK sends (`model`, `input` a string or a list,
`encoding_format`), records it in `requests`, and answers OpenAI's shape: one `data` item per
input (`object`, `index`, `embedding`) and `usage`. The vectors stand for meaning the way a
model's would, only simpler: words of one `TOPICS` group point the same way ("puppy" is near
"labrador" though no letter is shared), every other word to a dimension of its own hash; the
sum is normalised. `stop()` kills it (connections refused from then on); `start()` again on the
same port brings it back.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from typing import Any

from aiohttp import web

DIM = 64
TOPICS = (
    {"puppy", "dog", "labrador", "pet", "biscuit"},
    {"identity", "transgender", "woman"},
    {"money", "paid", "euros", "rent"},
)
_WORD = re.compile(r"[a-z]+")


def vector(text: str) -> list[float]:
    v = [0.0] * DIM
    for word in _WORD.findall(text.lower()):
        topic = next((i for i, group in enumerate(TOPICS) if word in group), None)
        if topic is not None:
            v[topic] += 3.0
        else:
            v[len(TOPICS) + int(hashlib.md5(word.encode()).hexdigest(), 16) % (DIM - 3)] += 1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


class FakeEmbeddings:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._arrived = asyncio.Condition()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def inputs(self, model: str) -> list[str]:
        """Every text asked to be embedded with ``model``, in order."""
        return [t for r in self.requests if r.get("model") == model for t in r["input"]]

    async def start(self) -> FakeEmbeddings:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()
            self._runner = None

    async def wait_for(self, condition: Any, within: float = 15.0) -> None:
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(condition)

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not body.get("model"):
            error = {"message": "input and model are required", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        self.requests.append({"model": body["model"], "input": texts})
        async with self._arrived:
            self._arrived.notify_all()
        data = [
            {"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)
        ]
        tokens = sum(len(t.split()) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )
