"""What people send besides text, and the voice of answers.

Public: `rules` (`MediaRules`, the `[media]` limits adapters check before and during any
download), `attachments` (making an inbound's attachments into text and references kept in the
workspace), `pictures` (the pictures a request carries, as data URLs), `transcribe` (voice to
text), `speech` (text to voice) and `voice` (which answers are read aloud, and what of them);
and, for the pages the web tools read (bot/web/, bot/tools/read_page.py), `documents` (text out
of PDFs and text files; the PDF reader's child process), `sandbox` (running that child within
limits) and `threads` (the media's own threads, apart from the default executor).
"""

__all__ = [
    "attachments",
    "documents",
    "pictures",
    "rules",
    "sandbox",
    "speech",
    "threads",
    "transcribe",
    "voice",
]
