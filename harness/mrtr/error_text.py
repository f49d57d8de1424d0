"""What a failed round said, in words a person can act on, with every secret taken out.

`tool_error` alone does not tell an on-call engineer that a refund desk answered "order
O-1001 has no item 'box'": the server's own text does. So a round that ends in a tool
error (its text content), a JSON-RPC error (its `message`) or an HTTP error (the status
and a short excerpt of the body) carries a message into the journal and the reports.

Two rules shape it:

* secrets never: a server may echo what it was sent, and what it was sent includes a
  sealed requestState and a token; a misconfigured one may print a key. `scrub` passes
  the text through the harness's one scrubber (`harness.secrets`: every secret the
  harness holds by value, then anything that looks like one) before the text goes
  anywhere, and the text is cut to `MESSAGE_LIMIT`;
* equal errors group: Locust groups its failures by `repr(error)`, and the reports count
  errors by message, so `error_pattern` replaces what differs from one flow to the next
  (ids, numbers that look like ids, UUIDs, times, quoted values) by placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from harness import foreign_text, secrets

__all__ = ["MESSAGE_LIMIT", "content_text", "error_pattern", "http_excerpt", "scrub"]

MESSAGE_LIMIT: Final = 200
"""Longest message journaled per round: enough for a sentence, not for a stack trace."""

SCRUB_LIMIT: Final = 64 * 1024
"""Characters of a text that are scrubbed at most: the message keeps `MESSAGE_LIMIT` of them, and a server's error
of megabytes must not cost the load process the time to scrub it all."""

_BODY_PEEK: Final = 2000
"""Bytes of an HTTP error body looked at; a proxy's error page says what it has to say early."""

_ID: Final = re.compile(r"\b(?:(?P<id>(?=[\w\-]*\d)(?=[\w\-]*[A-Za-z])[A-Za-z0-9][\w\-]*)"
                       r"|(?P<skip>[A-Za-z0-9][\w\-]{64,}+))")
"""An id (a word of letters, digits, `_` and `-` from a word's start, holding a digit and a letter), or (`skip`) the
rest of a long word where none starts: every later start in it would fail alike, so none is scanned again (without
it, a word of 100,000 `a-` took time quadratic in its length)."""


def _id_or_kept(match: re.Match[str]) -> str:
    return "<id>" if match["id"] is not None else match[0]


_PATTERNS: Final = (
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"), "<time>"),
    (re.compile(r"(?<!\w)'[^'\n]{0,80}'(?!\w)|(?<!\w)\"[^\"\n]{0,80}\"(?!\w)"), "<value>"),
    (_ID, _id_or_kept),
    (re.compile(r"(?<![\w.\-])\d{4,}(?![\w.])"), "<n>"),
)
"""What differs between two reports of one error, in the order it is replaced: a UUID before
the id rule would cut it into pieces, a quoted value before the id rule keeps its quotes whole. Each takes time
linear in the text, which a server controls."""

_TAGS: Final = re.compile(r"<[^>]{0,200}>")


def scrub(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` on one line with every secret-looking run replaced and every control character shown escaped
    (`harness.foreign_text.line`), cut to `limit` characters.

    Scrubbed before it is cut, so a token cut in half cannot slip under a length rule.
    """
    if len(text) > SCRUB_LIMIT:
        text = _cut_at_a_blank(text, SCRUB_LIMIT)
    return foreign_text.line(secrets.scrub(text, foreign=True), limit)


def _cut_at_a_blank(text: str, limit: int) -> str:
    """At most `limit` characters of `text`, ending before the word the limit falls in: no secret is left cut in
    half, where no rule would know it."""
    if text[limit].isspace():
        return text[:limit]
    words = text[:limit].rsplit(None, 1)
    return words[0] if len(words) == 2 else ""


def error_pattern(message: str) -> str:
    """The message with what varies per flow replaced, so equal errors read (and group) as one."""
    for pattern, placeholder in _PATTERNS:
        message = pattern.sub(placeholder, message)
    return message


def http_excerpt(body: bytes) -> str:
    """The start of an HTTP error body as text: markup dropped, whitespace folded, secrets scrubbed."""
    text = body[:_BODY_PEEK].decode("utf-8", "replace")
    return scrub(_TAGS.sub(" ", text))


def content_text(result: Mapping[str, Any] | None) -> str:
    """A tool result's text content, its text blocks joined (images and resources say nothing here)."""
    content = (result or {}).get("content")
    if not isinstance(content, list):
        return ""
    return " ".join(str(block["text"]) for block in content
                    if isinstance(block, Mapping) and isinstance(block.get("text"), str))
