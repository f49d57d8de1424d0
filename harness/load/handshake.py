"""Master and workers prove they hold the deployment's cluster secret before SETUP is sent or obeyed.

An HMAC-SHA256 challenge-response over Locust's own messages, then every message of the harness's
own that carries data (SETUP, journal lines, metrics) sealed with a key of that one session:

    worker -> master   HELLO      {version, nonce: w}
    master -> worker   CHALLENGE  {nonce: m, proof: H(secret, "master", node, w, m)}
    worker -> master   AUTH       {proof: H(secret, "worker", node, m, w)}   (only once the master's proof held)
    master -> worker   SETUP      sealed                                     (only once the worker's proof held)

`node` is the worker's Locust node id (its ZeroMQ identity, which the master checks every message
against), `w` and `m` fresh random nonces: a proof cannot be replayed, reflected (the role is in it)
or moved to another node. The session key is H(secret, "session", node, w, m): someone who relays
a handshake between a worker and the real master learns no key, so cannot seal a SETUP of its own
(a command to run, a file to read, a URL to send a secret to) nor a journal line.
The secret is `MRTR_CLUSTER_SECRET`, the same on the master and every worker, never in a scenario
or in the results; `run --workers N` starts both sides, so it draws a throwaway one when unset.

Why not ZeroMQ's CURVE: Locust makes its sockets inside its runners' constructors (a new context
each, bound or connected at once, again on every reconnect), so CURVE would mean replacing Locust's
transport classes and running a ZAP authenticator thread in a gevent process. What the handshake does
not give that CURVE would: secrecy (the traffic is readable on the wire) and the integrity of
Locust's own control messages (spawn, stop, quit) against someone on the path between worker and
master. Keep that path inside one network only the harness reaches (deploy/kubernetes/harness's
NetworkPolicy) or a tunnel.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import Any, TypeGuard

import orjson

from harness.secrets import env_secret, register

CLUSTER_SECRET_ENV = "MRTR_CLUSTER_SECRET"
_CONTEXT = b"mrtr-harness cluster 1"
_NONCE_CHARS = 64


def cluster_secret(*, throwaway: bool) -> str:
    """The cluster secret from `MRTR_CLUSTER_SECRET` (registered, so never written out); unset: MissingSecret (exit 2),
    or with `throwaway` (`run --workers N`: the harness starts both sides, on this machine) one drawn now, for the
    master to hand its own worker processes in their environment only (not this process's: the target and the
    commands it starts never see it; nothing to say: no one else needs it)."""
    if throwaway and not os.environ.get(CLUSTER_SECRET_ENV):
        drawn = secrets.token_urlsafe(32)
        register(drawn, "secret")
        return drawn
    return env_secret(CLUSTER_SECRET_ENV, throwaway=False,
                      what="the secret the run's master and its workers share (the same value on every machine)")


def new_nonce() -> str:
    return secrets.token_hex(_NONCE_CHARS // 2)


def is_nonce(value: object) -> TypeGuard[str]:
    """Whether `value` is a nonce as `new_nonce` makes them (anything else from the wire is refused)."""
    return isinstance(value, str) and len(value) == _NONCE_CHARS and all(c in "0123456789abcdef" for c in value)


def _mac(key: bytes, *parts: str | bytes) -> str:
    joined = b"\0".join([_CONTEXT, *(part if isinstance(part, bytes) else part.encode() for part in parts)])
    return hmac.new(key, joined, hashlib.sha256).hexdigest()


def proof(secret: str, role: str, node: str, first: str, second: str) -> str:
    """What `role` ("master" or "worker") answers for `node`'s handshake: its peer's nonce first, then its own."""
    return _mac(secret.encode(), role, node, first, second)


def proven(expected: str, given: object) -> bool:
    """Whether `given`, from the wire, is the proof `expected` (in constant time)."""
    return isinstance(given, str) and hmac.compare_digest(expected, given)


class Session:
    """One worker's session once both proofs held: each message of the harness's own sealed with its key, its kind
    and a number that only grows per kind, so one sent by anyone else, sent again or as another kind is refused."""

    def __init__(self, secret: str, node: str, worker_nonce: str, master_nonce: str) -> None:
        self._key = bytes.fromhex(_mac(secret.encode(), "session", node, worker_nonce, master_nonce))
        self._sent: dict[str, int] = {}
        self._taken: dict[str, int] = {}

    def seal(self, kind: str, data: Any) -> dict[str, Any]:
        """`data` (plain JSON) sealed as a message of `kind`, to send."""
        number = self._sent[kind] = self._sent.get(kind, 0) + 1
        return {"data": data, "n": number, "mac": self._seal(kind, number, data)}

    def open(self, kind: str, sealed: object) -> Any:
        """The data of a message of `kind` the other side sealed in this session after the last one taken; `Unsealed`
        when it is not one."""
        if not isinstance(sealed, dict) or type(sealed.get("n")) is not int or sealed["n"] <= self._taken.get(kind, 0):
            raise Unsealed("not sealed in this session, or sealed before")
        try:
            expected = self._seal(kind, sealed["n"], sealed.get("data"))
        except TypeError:  # orjson: not plain JSON
            raise Unsealed("not plain data") from None
        if not proven(expected, sealed.get("mac")):
            raise Unsealed("its seal does not hold")
        self._taken[kind] = sealed["n"]
        return sealed.get("data")

    def _seal(self, kind: str, number: int, data: Any) -> str:
        return _mac(self._key, kind, str(number), orjson.dumps(data, option=orjson.OPT_SORT_KEYS))


class Unsealed(ValueError):
    """A message that should be sealed in the session is not (forged, replayed or damaged)."""
