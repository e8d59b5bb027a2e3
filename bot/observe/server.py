"""The `[metrics] listen` HTTP endpoint: /metrics for Prometheus, /healthz for systemd or an
orchestrator.

/healthz is JSON, 200 when every platform is connected (its adapter's `ready`) and the model is
reachable, else 503. In `lightgrep ingress` (no model) and `lightgrep worker` (no platform) the
cluster's part says the rest: connected to NATS, and a worker's claims held (bot/cluster/).
The model counts as reachable if its newest call (bot.observe.metrics.MODEL)
succeeded within MODEL_FRESH_S; otherwise we ask the provider's `GET /models` (no tokens spent)
at most once per PROBE_EVERY_S, so a scraper polling every second costs the provider nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bot.config import LLMConfig
from bot.observe.metrics import MODEL, REGISTRY
from bot.platform import PlatformAdapter, PlatformStartError

log = logging.getLogger(__name__)

OPENAI_BASE = "https://api.openai.com/v1"
MODEL_FRESH_S = 60.0
PROBE_EVERY_S = 30.0
PROBE_TIMEOUT_S = 5.0


class ObserveServer:
    """Serves /metrics and /healthz on `listen` ("host:port") while the bot runs."""

    def __init__(
        self,
        listen: str,
        adapters: list[PlatformAdapter],
        llm: LLMConfig | None,
        cluster: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """`llm` None: this process asks no model; `cluster()`: the cluster's health, its
        "healthy" key part of the answer's."""
        host, _, port = listen.rpartition(":")
        self._host, self._port = host.strip("[]"), int(port)
        self._adapters = adapters
        self._llm = llm
        self._cluster = cluster
        self._runner: web.AppRunner | None = None
        self._probed: tuple[float, bool, str] | None = None  # (when, reachable, why not)
        self._probe_lock = asyncio.Lock()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, self._host, self._port).start()
        except OSError as exc:
            await self._runner.cleanup()
            raise PlatformStartError(
                f"[metrics] listen {self._host}:{self._port}: cannot listen there "
                f"({exc.strerror or exc})"
            ) from None
        log.info("metrics on http://%s:%d/metrics, health on /healthz", self._host, self._port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        platforms = {a.name: {"connected": a.ready.is_set()} for a in self._adapters}
        healthy = all(p["connected"] for p in platforms.values())
        body: dict[str, Any] = {"healthy": healthy, "platforms": platforms}
        if self._llm is not None:
            reachable, detail = await self._model_reachable(self._llm)
            healthy = healthy and reachable
            body["model"] = {"reachable": reachable, "detail": detail}
        if self._cluster is not None:
            body["cluster"] = cluster = self._cluster()
            healthy = healthy and bool(cluster["healthy"])
        body["healthy"] = healthy
        return web.json_response(body, status=200 if healthy else 503)

    async def _model_reachable(self, llm: LLMConfig) -> tuple[bool, str]:
        if MODEL.ok is not None and time.monotonic() - MODEL.at < MODEL_FRESH_S:
            age = time.monotonic() - MODEL.at
            return MODEL.ok, f"last call {age:.0f} s ago" + ("" if MODEL.ok else f": {MODEL.error}")
        async with self._probe_lock:
            if self._probed is None or time.monotonic() - self._probed[0] >= PROBE_EVERY_S:
                self._probed = (time.monotonic(), *await self._probe(llm))
            _, reachable, why = self._probed
        return reachable, "GET /models answered" if reachable else why

    async def _probe(self, llm: LLMConfig) -> tuple[bool, str]:
        """GET {base_url}/models: the cheapest request that says the provider is up."""
        url = (llm.base_url or OPENAI_BASE).rstrip("/") + "/models"
        headers = {"Authorization": f"Bearer {llm.api_key}"} if llm.api_key else {}
        timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as http,
                http.get(url, headers=headers) as response,
            ):
                if response.status == 200:
                    return True, ""
                return False, f"GET /models answered HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return False, f"GET /models failed: {type(exc).__name__}"
