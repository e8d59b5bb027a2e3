"""The OpenAI-compatible LLM client: the SDK's request path over our aiohttp transport.

Public: `client` (`LLMClient`, its errors, and `sdk_client`: the SDK's client as voice
transcription builds it too), `stream` (assembling a streamed answer into a `ChatResult`, also
used by the usage and metrics wrappers), `http` (the aiohttp transport the SDK runs on) and
`embeddings` (the [search] endpoint that ranks history by meaning),
`body` (a request's JSON, its pictures spliced in: `Spliced` marks a data URL that needs no
escaping), `habits` (what a server was seen to do with tools: the turn asks in the shape that
gets an answer), `chain` (endpoints in order, each with its window and its circuit breaker:
`breaker`), `entities` (quote marks a model wrote as HTML entities, shown as quote marks).
`sse` (the event-stream reader) and `overflow` (the wording providers use for a context
overflow) are its own.
"""

__all__ = [
    "body", "breaker", "chain", "client", "embeddings", "entities", "habits", "http", "stream",
]  # fmt: skip
