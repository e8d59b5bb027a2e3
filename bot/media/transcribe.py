"""Voice messages and audio to text, through an OpenAI-compatible /v1/audio/transcriptions.

OpenAI, vLLM, LocalAI, speaches and whisper.cpp's server (with that path) offer the endpoint;
Ollama does not. It defaults to the [llm] endpoint and key, since a local server often serves
both. Failures become TranscriptionError with a reason fit for the log (masked: a provider may
quote the request); the person gets one sentence from bot/media/attachments.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import openai

from bot import logsafe
from bot.llm.client import sdk_client

if TYPE_CHECKING:
    from bot.config import Config

log = logging.getLogger(__name__)


class TranscriptionError(Exception):
    """The endpoint could not turn the audio into text (unreachable, refused, empty)."""


class Transcriber:
    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        self.model = model
        self._client = sdk_client(
            base_url=base_url, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries
        )

    @classmethod
    def from_config(cls, config: Config) -> Transcriber | None:
        """The [transcription] endpoint (falling back to [llm]'s), or None when switched off."""
        section = config.transcription
        if not section.enabled:
            return None
        return cls(
            model=section.model,
            base_url=section.base_url or config.llm.base_url,
            api_key=section.api_key or config.llm.api_key,  # masked in logs (sdk_client)
            timeout_s=section.timeout_s,
            max_retries=config.llm.max_retries,
        )

    async def transcribe(self, data: bytes, name: str, mime: str) -> str:
        """The words spoken in the audio. The file name's extension tells the server the
        format, so it must match the bytes (bot.media.rules.extension)."""
        try:
            result = await self._client.audio.transcriptions.create(
                model=self.model, file=(name, data, mime), response_format="json"
            )
        except openai.APIStatusError as exc:
            raise TranscriptionError(f"HTTP {exc.status_code}: {provider_reason(exc)}") from exc
        except openai.APITimeoutError as exc:
            raise TranscriptionError("timed out") from exc
        except openai.APIConnectionError as exc:
            raise TranscriptionError("could not be reached") from exc
        except openai.OpenAIError as exc:
            raise TranscriptionError(type(exc).__name__) from exc
        text = result if isinstance(result, str) else getattr(result, "text", None)
        if not isinstance(text, str):
            raise TranscriptionError("the answer holds no text")
        return text.strip()

    async def aclose(self) -> None:
        await self._client.close()


def provider_reason(exc: openai.APIStatusError) -> str:
    """The reason a provider gave for refusing, masked and short: fit for the log."""
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    if not message and isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    return logsafe.mask(str(message or "no reason given"))[:200]
