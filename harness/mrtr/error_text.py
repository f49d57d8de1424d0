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

_BODY_PEEK: Final = 2000
"""Bytes of an HTTP error body looked at; a proxy's error page says what it has to say early."""

_PATTERNS: Final = (
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"), "<time>"),
    (re.compile(r"(?<!\w)'[^'\n]{0,80}'(?!\w)|(?<!\w)\"[^\"\n]{0,80}\"(?!\w)"), "<value>"),
    (re.compile(r"\b(?=[\w\-]*\d)(?=[\w\-]*[A-Za-z])[A-Za-z0-9][\w\-]*"), "<id>"),
    (re.compile(r"(?<![\w.\-])\d{4,}(?![\w.])"), "<n>"),
)
"""What differs between two reports of one error, in the order it is replaced: a UUID before
the id rule would cut it into pieces, a quoted value before the id rule keeps its quotes whole."""

_TAGS: Final = re.compile(r"<[^>]{0,200}>")


def scrub(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` on one line with every secret-looking run replaced and every control character shown escaped
    (`harness.foreign_text.line`), cut to `limit` characters.

    Scrubbed before it is cut, so a token cut in half cannot slip under a length rule.
    """
    return foreign_text.line(secrets.scrub(text, foreign=True), limit)


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
