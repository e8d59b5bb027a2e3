"""What people send besides text: pictures, voice, audio and files.

Public: `rules` (`MediaRules`, the `[media]` limits adapters check before any download),
`attachments` (making an inbound's attachments into text and references kept in the workspace)
and `transcribe` (voice to text). `documents` (text out of PDFs and text files) is its own.
"""

__all__ = ["attachments", "rules", "transcribe"]
