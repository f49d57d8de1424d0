"""Text from outside is data: the one place foreign text is made safe for the sink it is about to reach.

A server names its tools, writes its errors and its logs; a ledger, an OAuth endpoint or a
results folder handed over say what they like. None of it may act on where it is shown: an
ANSI sequence that erases a ✓ line on the terminal, a newline that ends a TOML comment and
starts `[target.auth]`, a control character that makes junit.xml unparseable (CI loses the
verdict), a lone surrogate that cannot be written as UTF-8 at all. So every such text passes
through one function per sink before it is written:

* `line`: one line of a terminal, a log or a TOML comment (`toml_comment`): whitespace folded
  to single spaces, so no newline survives;
* `block`: several lines for a terminal (newlines kept), and `agent`: what the assistant
  answers an agent with;
* `xml` (and `clean_xml_tree`, for a whole ElementTree): what XML 1.0 allows, newlines and tabs kept;
* `html`: `block` then HTML-escaped, quotes included.

Whatever a sink cannot hold (C0 and C1 controls, DEL, U+2028/U+2029, the bidirectional
overrides that reorder what a reader sees, surrogates, U+FFFE/U+FFFF) is shown escaped as
`\\x1b`, `\\u202e`: visible, inert, plain ASCII and the same whatever the sink, so a text passed
through a second sink is not escaped twice. Every function caps its text (`…` marks a cut) and works in
time linear in the length of its input, which it reads only up to a bound of its cap.
"""

from __future__ import annotations

import html as _html
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

__all__ = ["AGENT_LIMIT", "BLOCK_LIMIT", "LINE_LIMIT", "XML_LIMIT", "agent", "block", "clean_xml_tree", "html", "line",
           "toml_comment", "xml"]

LINE_LIMIT: Final = 500
"""Longest line a foreign text becomes by default: a sentence and its ids, not a stack trace."""
BLOCK_LIMIT: Final = 20_000
"""Longest multi-line text by default (a table, a log excerpt)."""
AGENT_LIMIT: Final = 20_000
"""Longest text in one field of an answer to an agent (the assistant's `output` keeps 8,000 characters' tail)."""
XML_LIMIT: Final = 65_536
"""Longest text or attribute value in an XML document (junit.xml's system-out holds every problem)."""

_CUT: Final = "…"
_READ_FACTOR: Final = 4
"""How much more than its cap a sink reads of a text: folding whitespace may shrink what it read."""


def _escaped(code: int) -> str:
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


_BIDI: Final = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
"""The bidirectional marks, embeddings, overrides and isolates: they reorder what a reader sees of the text."""
_UNSAFE: Final = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *_BIDI, *range(0xD800, 0xE000),
                  0xFFFE, 0xFFFF)
"""Every character no sink shows as itself."""
_ESCAPE: Final[dict[int, str]] = {code: _escaped(code) for code in _UNSAFE}
"""`str.translate`'s table: each unsafe character to its visible escape."""
_KEEP_NEWLINES: Final[dict[int, str]] = {**_ESCAPE, ord("\n"): "\n", ord("\t"): "\t", ord("\r"): ""}
"""Multi-line sinks: newlines and tabs kept, a carriage return dropped (a CRLF is one newline, a lone CR
would rewrite the terminal's line)."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + _CUT


def line(text: object, limit: int = LINE_LIMIT) -> str:
    """`text` as one line: whitespace runs (newlines included) folded to one space, everything else unsafe
    escaped, at most `limit` characters."""
    raw = str(text)[:limit * _READ_FACTOR]
    return _cut(" ".join(raw.split()).translate(_ESCAPE), limit)


def toml_comment(text: object, limit: int = LINE_LIMIT) -> str:
    """`text` fit to follow `# ` on one TOML comment line: no newline, no control character (TOML forbids them in
    a comment), so nothing in it can start a table or a key."""
    return line(text, limit)


def block(text: object, limit: int = BLOCK_LIMIT) -> str:
    """`text` as lines for a terminal: newlines and tabs kept, every other unsafe character escaped (an ANSI
    sequence loses its ESC and shows as text), at most `limit` characters."""
    return _cut(str(text)[:limit * _READ_FACTOR].translate(_KEEP_NEWLINES), limit)


def agent(text: object, limit: int = AGENT_LIMIT) -> str:
    """`text` in an answer to an agent: as `block`, so what the agent shows its user cannot drive a terminal."""
    return block(text, limit)


def xml(text: object, limit: int = XML_LIMIT) -> str:
    """`text` as XML 1.0 allows it in a text node or an attribute (the XML library escapes `<`, `&` and quotes)."""
    return block(text, limit)


def html(text: object, limit: int = BLOCK_LIMIT) -> str:
    """`text` escaped for an HTML document, in a text node or a quoted attribute."""
    return _html.escape(block(text, limit), quote=True)


def clean_xml_tree(root: ET.Element) -> ET.Element:
    """Every text, tail and attribute value of the tree under `root` made what XML 1.0 allows, in place: the one
    pass a document goes through before it is written, whatever its writer put in it (names are the writer's own)."""
    for element in root.iter():
        if element.text is not None:
            element.text = xml(element.text)
        if element.tail is not None:
            element.tail = xml(element.tail)
        if element.attrib:
            element.attrib = {name: xml(value) for name, value in element.attrib.items()}
    return root
