"""Text to speech, through an OpenAI-compatible /v1/audio/speech endpoint: the voice of answers.

OpenAI and the local servers that copy its API (speaches, Kokoro-FastAPI, LocalAI) offer it. It
defaults to the [llm] endpoint and key, as transcription does (bot/media/transcribe.py). The
audio is asked for as OGG/Opus, what Telegram plays as a voice message and Discord as an audio
file, so nothing needs converting (no ffmpeg). Failures become SpeechError with a reason fit for
the log (masked: a provider may quote the request); what the person hears of it is
bot/media/voice.py's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import openai

from bot.llm.client import sdk_client
from bot.media.transcribe import provider_reason

if TYPE_CHECKING:
    from bot.config import Config

log = logging.getLogger(__name__)

OGG = b"OggS"  # the first bytes of every OGG page
MAX_AUDIO_BYTES = 10 * 1024 * 1024  # Discord's upload limit; 1,500 characters take ~0.5 MB


class SpeechError(Exception):
    """The endpoint gave no usable audio (unreachable, refused, too slow, not OGG/Opus)."""


class Speaker:
    def __init__(
        self,
        *,
        model: str,
        voice: str,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float = 30.0,
        max_retries: int = 1,
    ) -> None:
        self.model = model
        self.voice = voice
        self.timeout_s = timeout_s
        self._client = sdk_client(
            base_url=base_url, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries
        )

    @classmethod
    def from_config(cls, config: Config) -> Speaker | None:
        """The [voice] endpoint (falling back to [llm]'s), or None when switched off."""
        section = config.voice
        if not section.enabled:
            return None
        return cls(
            model=section.model,
            voice=section.voice,
            base_url=section.base_url or config.llm.base_url,
            api_key=section.api_key or config.llm.api_key,  # masked in logs (sdk_client)
            timeout_s=section.timeout_s,
            max_retries=config.llm.max_retries,
        )

    async def speak(self, text: str) -> bytes:
        """`text` read aloud, as OGG/Opus bytes; within `timeout_s` all told (retries too)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._fetch(text)
        except TimeoutError as exc:
            raise SpeechError("timed out") from exc
        except openai.APIStatusError as exc:
            raise SpeechError(f"HTTP {exc.status_code}: {provider_reason(exc)}") from exc
        except openai.APITimeoutError as exc:
            raise SpeechError("timed out") from exc
        except openai.APIConnectionError as exc:
            raise SpeechError("could not be reached") from exc
        except openai.OpenAIError as exc:
            raise SpeechError(type(exc).__name__) from exc

    async def _fetch(self, text: str) -> bytes:
        """Read as it comes, at most MAX_AUDIO_BYTES: a server gone wrong cannot fill the RAM."""
        speech = self._client.audio.speech.with_streaming_response
        async with speech.create(
            model=self.model, voice=self.voice, input=text, response_format="opus"
        ) as response:
            audio = bytearray()
            async for chunk in response.iter_bytes():
                audio += chunk
                if len(audio) > MAX_AUDIO_BYTES:
                    raise SpeechError(f"the audio is over {MAX_AUDIO_BYTES} bytes")
        if not audio.startswith(OGG):
            raise SpeechError("the answer is not OGG/Opus (is response_format supported?)")
        return bytes(audio)

    async def aclose(self) -> None:
        await self._client.close()
