"""Every secret the harness holds, by value, and the one scrubber every text it writes passes through.

A secret is registered once, where the harness reads it: the client secret (`env_secret`),
every token whatever its source (`harness.auth.token`, a tokens file's lines: `file_secrets`), every sealing
key (`harness.mrtr.keys`). Whatever then reaches the journal (each batch, `scrub_bytes`), the
terminal, a log or a report (`scrub`) has each registered value replaced by its fingerprint
(`<token 1a2b3c4d5e6f>`): a server that echoes a token, a chaos command that prints the key
file it was handed, are caught whatever the text around them. Then the keyword rules catch
what the harness never held but still looks like a secret (`MCP_CLIENT_SECRET=...`,
`Authorization: ...`, `-u user:pass`, `user:pass@` in a URL, JWTs, long random runs).

Values shorter than `MIN_VALUE` characters are not searched for (they would match ordinary
words and ids); the keyword rules still apply to them. Registries are per process: each load
process registers what it reads itself.

Commands the harness runs for the target (chaos commands, token commands) inherit only
`command_env`: the allow-list `COMMAND_ENV` plus the variables the scenario names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from harness.errors import UsageError

__all__ = ["COMMAND_ENV", "MIN_VALUE", "MissingSecret", "command_env", "env_secret", "file_secrets", "fingerprint",
           "forget", "register", "scrub", "scrub_bytes"]

MIN_VALUE: Final = 8
"""Shortest value searched for by value: anything shorter would match words, ids and JSON keys."""

_GRAM: Final = 8
"""Length of the pieces a value is found by: the text is looked at every `_GRAM` bytes, not at every byte."""

COMMAND_ENV: Final = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE",
                      "LC_MESSAGES", "TZ", "TMPDIR", "TERM", "PWD", "SYSTEMROOT", "KUBECONFIG", "DOCKER_HOST",
                      "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")
"""What a command the harness runs for the target inherits of the harness's environment without being named:
enough to find programs, its home, the cluster or Docker engine it acts on (where they are, never a
credential) and to print text. Anything else (a cloud profile, a vault address) the scenario names
(`[target] command_env`, `[target.auth] command_env`)."""


class MissingSecret(UsageError):
    """A secret the run needs is not on this machine: its environment variable is unset or empty, or the file that
    should hold it cannot be read or holds none (`env_secret`, `file_secrets`). The user's to fix: exit 2."""


def fingerprint(value: str | bytes) -> str:
    """A short, non-secret name for a key, token or secret, safe for logs, journals and reports."""
    raw = value.encode() if isinstance(value, str) else value
    return hashlib.sha256(b"mrtr-harness/key-fingerprint:" + raw).hexdigest()[:12]


class _Registry:
    """The values of this process's secrets, found in a text at a cost that does not grow with their number.

    Every occurrence of a value at least `2 * _GRAM - 1` bytes long covers a piece of the text
    that starts at a multiple of `_GRAM` and is one of the value's first `_GRAM` pieces; so the
    text's pieces (read as machine words, in C) are looked up in a table of those pieces, and
    only a text that holds one is walked to check each hit.
    Shorter values are few (client secrets) and are searched for one by one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[bytes, int] = {}
        """Each value's forms, and how many holders registered it (it is searched for while one does)."""
        self._pieces: dict[int, list[tuple[int, bytes, bytes]]] = {}
        """A piece, as the machine word its bytes make -> (where it sits in the value, the value, its placeholder)."""
        self._short: dict[bytes, bytes] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def add(self, value: str, kind: str) -> None:
        placeholder = f"<{kind} {fingerprint(value)}>".encode()
        with self._lock:
            for needle in _forms(value):
                self._held[needle] = self._held.get(needle, 0) + 1
                if self._held[needle] > 1:
                    continue
                if len(needle) < 2 * _GRAM - 1:
                    self._short[needle] = placeholder
                    continue
                for offset in range(_GRAM):
                    piece = _word(needle, offset)
                    self._pieces[piece] = [*self._pieces.get(piece, ()), (offset, needle, placeholder)]

    def discard(self, value: str) -> None:
        """One holder of `value` let it go; once none holds it, it is no longer searched for."""
        with self._lock:
            for needle in _forms(value):
                held = self._held.pop(needle, 0) - 1
                if held > 0:
                    self._held[needle] = held
                    continue
                self._short.pop(needle, None)
                for offset in range(_GRAM):  # new lists, never changed in place: a search may be reading one
                    piece = _word(needle, offset)
                    kept = [entry for entry in self._pieces.get(piece, ()) if entry[1] != needle]
                    if kept:
                        self._pieces[piece] = kept
                    else:
                        self._pieces.pop(piece, None)

    def replace(self, data: bytes) -> bytes:
        """`data` with every registered value replaced by its placeholder."""
        spans: list[tuple[int, int, bytes]] = []
        pieces = self._pieces
        words = memoryview(data)[:len(data) - len(data) % _GRAM].cast("Q")  # the text's pieces, read in C
        if pieces and not pieces.keys().isdisjoint(words):  # only a text that holds a piece is walked
            for index, word in enumerate(words.tolist()):
                for offset, needle, placeholder in pieces.get(word, ()):
                    start = index * _GRAM - offset
                    if start >= 0 and data.startswith(needle, start):
                        spans.append((start, start + len(needle), placeholder))
        for needle, placeholder in list(self._short.items()):
            start = data.find(needle)
            while start >= 0:
                spans.append((start, start + len(needle), placeholder))
                start = data.find(needle, start + len(needle))
        return _cut(data, spans) if spans else data


def _word(needle: bytes, offset: int) -> int:
    """The `_GRAM` bytes of `needle` from `offset`, as `memoryview.cast("Q")` reads them from a text."""
    return int.from_bytes(needle[offset:offset + _GRAM], sys.byteorder)


def _forms(value: str) -> set[bytes]:
    """A value as text, and as it stands in a JSON string (orjson escapes as `json` does without ensure_ascii)."""
    return {value.encode(), json.dumps(value, ensure_ascii=False)[1:-1].encode()}


def _cut(data: bytes, spans: list[tuple[int, int, bytes]]) -> bytes:
    """`data` with each span replaced by its placeholder; overlapping spans become one (the first's placeholder)."""
    spans.sort()
    parts: list[bytes] = []
    kept = 0
    for start, end, placeholder in spans:
        if start < kept:  # overlaps one replaced already: extend it
            kept = max(kept, end)
            continue
        parts += [data[kept:start], placeholder]
        kept = end
    parts.append(data[kept:])
    return b"".join(parts)


_REGISTRY = _Registry()


def register(value: str, kind: str = "secret") -> str:
    """Remember `value` as a secret of this process (`kind`: secret, token, key); returns its fingerprint."""
    if len(value) >= MIN_VALUE:
        _REGISTRY.add(value, kind)
    return fingerprint(value)


def forget(value: str) -> None:
    """One `register` of `value` is over (a token dropped for a new one): the registry holds what is in use, so
    a long soak's refreshed tokens do not pile up. A value registered again meanwhile is kept."""
    if len(value) >= MIN_VALUE:
        _REGISTRY.discard(value)


def scrub_bytes(data: bytes) -> bytes:
    """Journal lines (JSON) with every registered value replaced by its fingerprint; nothing else changes."""
    return _REGISTRY.replace(data) if _REGISTRY else data


_VALUE: Final = r"(?!<)[^\s,;\"'&]+"
"""The value after a secret's name: up to a space, a separator or a quote; a placeholder is left alone."""

_NAMES: Final = r"(?:api[_\-]?key|key|token|secret|password|passwd|credentials?)"
"""Words that name a secret: as the last part of an assignment's name (`MCP_CLIENT_SECRET=`), or on their own (or
as `client_secret`, `access_token`, ...) before a colon; `invalid_token: ...` (an OAuth error) is not one."""

_FOLD: Final = str.maketrans({**{chr(code): chr(code + 32) for code in range(ord("A"), ord("Z") + 1)},
                              "\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
"""Each character a case-insensitive pattern takes for an ASCII letter, as that lowercase letter (Turkish İ and ı,
the long s, the Kelvin sign), one character for one: a text and its folded copy share their offsets, so a rule's
lowercase pattern is matched on the copy (several times faster than `(?i)`) and the text is replaced by its spans."""


def fold_case(text: str) -> str:
    """`text` with every character a `(?i)` pattern reads as an ASCII letter in lowercase, offsets unchanged."""
    return text.translate(_FOLD)


@dataclass(frozen=True)
class _Rule:
    """One kind of secret: a pattern, and what a match becomes (the text up to the end of group `keep`, or to the
    match's start when 0, then `placeholder`). A match of the group named `skip` is kept as it is: it steps over the
    rest of a long run where the pattern failed, so no position of the run is scanned again (linear time)."""

    pattern: re.Pattern[str]
    placeholder: str
    keep: int = 0
    folded: bool = False
    """The pattern is lowercase and matched on `fold_case(text)`: a case-insensitive rule."""

    def apply(self, text: str) -> str:
        parts: list[str] = []
        done = 0
        for match in self.pattern.finditer(fold_case(text) if self.folded else text):
            if match.lastgroup == "skip":
                continue
            parts.append(text[done:match.end(self.keep) if self.keep else match.start()])
            parts.append(self.placeholder)
            done = match.end()
        return "".join(parts) + text[done:] if parts else text


_REQUEST_STATE: Final = _Rule(re.compile(r"v1\.[A-Za-z0-9_\-]{8,}={0,2}"), "<requestState>")
_JWT: Final = _Rule(re.compile(r"eyJ(?<!\weyJ)(?:[A-Za-z0-9_\-]++\.[A-Za-z0-9_\-]++\.[A-Za-z0-9_\-]*+"
                               r"|(?P<skip>[A-Za-z0-9_\-]{64,}+))"), "<token>")
_AUTHORIZATION: Final = _Rule(re.compile(r"\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)[^\r\n\"']*"),
                              "<redacted>", 1, True)
_BEARER: Final = _Rule(re.compile(r"\b(bearer|basic)\s+[a-z0-9._~+/=\-]{8,}"), " <token>", 1, True)
_ASSIGNMENT: Final = _Rule(re.compile(rf"(?<![a-z0-9])({_NAMES}[\"']?\s*=\s*[\"']?){_VALUE}"), "<redacted>", 1, True)
_FIELD: Final = _Rule(re.compile(rf"(?<![\w\-.])((?:client|access|refresh|id)?[_\-]?{_NAMES}[\"']?\s*:\s*[\"']?)"
                                 rf"{_VALUE}"), "<redacted>", 1, True)
_CURL_USER: Final = _Rule(re.compile(r"(?<!\S)(-u\s*|--user[\s=]+|--proxy-user[\s=]+)([\"']?)([^\s:\"']*):[^\s\"']+"),
                          ":<redacted>", 3)
_USERINFO: Final = _Rule(re.compile(r"\b(?:([a-z][a-z0-9+.\-]*+://)([^\s/@:]*+):[^\s/@]++@"
                                    r"|(?P<skip>[a-z][a-z0-9+.\-]{64,}+))"), ":<redacted>@", 2, True)
_RULES: Final = (_REQUEST_STATE, _JWT, _AUTHORIZATION, _BEARER, _ASSIGNMENT, _FIELD, _CURL_USER, _USERINFO)
"""What a secret looks like, most specific first, each with its placeholder: a requestState, a JWT, an
Authorization header (to the end of its line), a bearer or basic credential, a `*_SECRET=`-style assignment, a
`secret: ...` field, curl's `-u user:pass`, a URL's `user:pass@`.

A server's error text is outside text, so each rule takes time linear in it: none starts with an unbounded run
that every position would scan again. The assignment rule keeps what comes before the secret's word untouched, so
it needs no pattern for the name's prefix (`MCP_CLIENT_` of `MCP_CLIENT_SECRET=`): the word must not follow a
letter or digit (`\\b` would fail on the underscore). Where a run can hold many starts (a JWT's first part, a URL's
scheme), a failed start steps over the rest of a long run (`skip`): every start in it fails alike."""

_LONG_HEX: Final = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{16,}(?![0-9A-Za-z])")
_RANDOM_RUN: Final = re.compile(r"[A-Za-z0-9+/_\-]{24,}={0,2}")
"""A run long enough to be a key or token; replaced only when it mixes cases and digits (see `_random`)."""


def scrub(text: str, *, foreign: bool = False) -> str:
    """`text` with every registered value replaced by its fingerprint, then anything named or shaped as a secret.

    `foreign`: a text from outside the harness (a server's error, a command's output), where a long hex run or a
    random-looking one is taken for a key or token too; the harness's own messages keep theirs (a results folder's
    name, a run id).
    """
    if _REGISTRY:
        text = _REGISTRY.replace(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")
    for rule in _RULES:
        text = rule.apply(text)
    if foreign:
        text = _RANDOM_RUN.sub(_random, _LONG_HEX.sub("<hex>", text))
    return text


def _random(match: re.Match[str]) -> str:
    """A long run is a secret when it looks random: upper and lower case and digits (a word or path does not)."""
    run = match.group(0)
    looks_random = any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)
    return "<token>" if looks_random else run


def env_secret(name: str, *, throwaway: bool, what: str) -> str:
    """The secret in environment variable `name`, registered; when unset or empty, MissingSecret naming it, or
    with `throwaway` (a deployment the harness starts both sides of, so any value serves) a value drawn now, put
    in the variable for the processes the harness starts, and said in one line on stderr."""
    value = os.environ.get(name)
    if not value:
        if not throwaway:
            raise MissingSecret(f"the environment variable {name} is not set: it must hold {what}")
        value = os.environ[name] = secrets.token_urlsafe(32)
        print(f"mrtr-harness: {name} is not set: drew a throwaway secret for this run (fingerprint "
              f"{fingerprint(value)}); any value serves an embedded target", file=sys.stderr)
    register(value, "secret")
    return value


def file_secrets(path: Path, *, where: str, kind: str = "token") -> list[str]:
    """The secrets in file `path`, one a line (blank lines and `#` comments skipped), in order, each registered
    (also those no one uses); MissingSecret naming `where` and the path when the file cannot be read or holds none."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise MissingSecret(f"{where} {path}: cannot read it: {exc.strerror}") from None
    values = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not values:
        raise MissingSecret(f"{where} {path} holds no {kind} (one {kind} a line)")
    for value in values:
        register(value, kind)
    return values


def command_env(names: Iterable[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a command run for the target: `COMMAND_ENV` and `names`, where set, then `extra`."""
    chosen = {name: os.environ[name] for name in (*COMMAND_ENV, *names) if name in os.environ}
    return {**chosen, **(extra or {})}
