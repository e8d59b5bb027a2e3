"""A user's memory and the long messages the window tests (and the llama-cpp-python replay) send."""

from __future__ import annotations

from memory.store import MEMORY_TEMPLATE

MIRO = MEMORY_TEMPLATE.replace("Information\n", "Information\n- Has a cat named Miso\n")


def message(i: int) -> str:
    return f"My cat Miso did thing number {i} today. " + "meow " * 40
