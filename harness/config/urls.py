"""URLs in a scenario: parsed when the file is read, not when the run connects."""

from __future__ import annotations

from urllib.parse import urlsplit

from harness.config.base import FieldProblem


def check_url(url: str, *where: str | int) -> None:
    """An http(s) URL with a host and, if given, a port that is one: refused here, not when the run connects."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or " " in url:
        raise FieldProblem(f"{url!r} is not an http(s) URL such as \"http://10.0.0.5:8000/mcp\"", *where)
