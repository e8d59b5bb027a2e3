"""A provider's error text is for the operator's log, masked; the person gets one sentence.

A provider answered a 400 whose message quoted the request's `Authorization: Bearer sk-…`
header; that text went verbatim to the Telegram user and to `doctor`'s output.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.rigs.agent import ask, dm, make_agent, session_records
from tests.rigs.fakes.openai_server import FakeOpenAI, Status, completion

OTHER_KEY = "sk-proj-SOMEONE-ELSES-KEY-5521"  # not a configured secret: masked by its look
OUR_KEY = "sk-test-secret"  # the key make_agent configures
LEAKY_400 = {
    "error": {
        "message": (
            f"Invalid header 'Authorization: Bearer {OTHER_KEY}'; project key {OUR_KEY} "
            "is not allowed to use model fake-model"
        ),
        "type": "invalid_request_error",
    }
}


async def test_a_400_quoting_a_bearer_token_reaches_neither_the_user_nor_the_log(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(Status(400, LEAKY_400))
    with caplog.at_level(logging.WARNING):
        reply = await ask(agent, dm("42", "hello"))
    fake_llm.queue(completion("Back again."))
    second = await ask(agent, dm("42", "still there?"))
    await agent.aclose()
    for secret in (OTHER_KEY, "SOMEONE-ELSES", OUR_KEY):
        assert secret not in reply.text
        assert secret not in caplog.text
    assert "Invalid header" not in reply.text and "fake-model" not in reply.text
    assert "refused that request" in reply.text and "saved" in reply.text  # not an outage
    # The operator still learns what went wrong.
    assert "Invalid header 'Authorization: Bearer ***'" in caplog.text
    assert "is not allowed to use model fake-model" in caplog.text
    assert second.text == "Back again."
    users = [r for r in session_records(workspaces_dir, "42") if r.get("role") == "user"]
    assert len(users) == 2  # the failed turn's message was saved, as the answer says


def test_every_log_record_is_masked_by_the_one_redactor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Whoever logs a provider's words (the consolidator, an SDK, an adapter) is covered too."""
    from bot import logsafe

    logsafe.hide(None)  # what LLMClient.from_config does when no key is configured
    with caplog.at_level(logging.WARNING):
        logging.getLogger("memory.consolidation.consolidator").warning(
            "consolidation failed: %s", LEAKY_400["error"]["message"]
        )
        try:
            raise RuntimeError(f"header was Bearer {OTHER_KEY}")
        except RuntimeError:
            logging.getLogger("adapters.telegram.adapter").exception("turn failed")
    assert OTHER_KEY not in caplog.text and "SOMEONE-ELSES" not in caplog.text
    assert "Bearer ***" in caplog.text
