"""URLs in a scenario: parsed when the file is read, not when the run connects."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

from harness.config.strict import FieldProblem


def check_url(url: str, *where: str | int) -> None:
    """An http(s) URL with a host and, if given, a port that is one: refused here, not when the run connects.

    A user name or password in the URL is refused too, and not echoed: a scenario is copied into
    every results folder, and credentials reach the harness through an environment variable.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.username is not None or parts.password is not None:
        raise FieldProblem(f"{without_credentials(url)!r} carries credentials before its host: take them out "
                           "(a token or client secret goes in [target.auth], read from an environment variable)",
                           *where)
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or " " in url:
        raise FieldProblem(f"{url!r} is not an http(s) URL such as \"http://10.0.0.5:8000/mcp\"", *where)


def without_credentials(url: str) -> str:
    """`url` with whatever stands before an `@` in its authority shown as `***`, for messages."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def is_loopback(url: str) -> bool:
    """Whether the URL's host is this machine itself (`localhost`, 127.0.0.0/8, ::1): nothing sent there leaves it."""
    host = urlsplit(url).hostname
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_transport(url: str, *others: str) -> bool:
    """Whether a secret may go to `url`: https, or http when it and every one of `others` is loopback."""
    if urlsplit(url).scheme == "https":
        return True
    return all(is_loopback(each) for each in (url, *others))


def secret_may_go(url: str, *others: str, allow_http: bool = False) -> bool:
    """Whether a secret (a bearer token, a client secret) may go to `url`: over https, over plain http when `url`
    and every one of `others` is loopback, or when `allow_http` says the network is private."""
    return allow_http or secure_transport(url, *others)


HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
"""A host name as a URL names it (an IP address is checked as one)."""


def host_name(host: str) -> str:
    """An `allow` entry is a host as URLs name it: refused, with its line, when it is a URL or has a port."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        if HOST_NAME.match(host) is None:
            raise ValueError(f"{host!r} is not a host name or address such as \"staging.example\" or "
                             "\"10.0.0.5\" (no scheme, port or path)") from None
    return host


HostName = Annotated[str, AfterValidator(host_name)]
"""One entry of `[target] allow`."""


def normal_host(host: str) -> str:
    """A host as URLs compare it: lower case, an IPv6 address without its brackets."""
    return host.strip("[]").lower()
