"""The requestState fuzzer's mutation classes: how a `fuzz` flow sends a state back wrong, and what must follow.

A `requestState` is attacker-controlled input: whatever a server minted, a client may
send back edited, cut, padded, re-encoded, of another type, minted for another call or
sealed under another key. Each class here is one way of getting it wrong; a `fuzz` flow
sends one mutant per retry, picked with its own seeded random stream, so the same seed
sends the same mutants. Every mutant must be refused (`-32602`), never completed, never
answered with a 5xx and never left to hang: `answer_of` is the one place that says which
answer counts as what, and the `no_mutant_accepted` invariant and the reports read it.

The mutants themselves never leave the flow: the journal keeps a mutant's class, length
and a short description (`bit 812 of 1,904`), never its value.

This module imports nothing of the MCP server SDK at start-up (the load process must
not): `foreign_state` imports the SDK's codec lazily, the first time a flow needs it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from harness.config.mutations import Mutation
from harness.config.think import RandomStream
from harness.mrtr.wire import JSON_NULL

EXPECTED_REASONS: Final[dict[Mutation, frozenset[str]]] = {
    Mutation.BIT_FLIP: frozenset({"seal"}),
    Mutation.TRUNCATE: frozenset({"malformed", "seal"}),
    Mutation.EXTEND: frozenset({"malformed", "seal"}),
    Mutation.RE_ENCODE: frozenset({"malformed"}),
    Mutation.EMPTY: frozenset({"malformed"}),
    Mutation.NON_STRING: frozenset({"non-string requestState"}),
    Mutation.OVERSIZE: frozenset({"seal"}),
    Mutation.SWAP_FLOW: frozenset({"request binding"}),
    Mutation.SWAP_TOOL: frozenset({"request binding"}),
    Mutation.SWAP_ARGUMENTS: frozenset({"request binding"}),
    Mutation.REPLAY_COMPLETED: frozenset(),
    Mutation.CROSS_PRINCIPAL: frozenset({"principal"}),
    Mutation.FOREIGN_KEY: frozenset({"unknown key"}),
    Mutation.EXPIRED: frozenset({"expired", "unknown key"}),
}
"""What mcp 2.3.0 logs for each class's -32602. A cut or padded token is `malformed` when its base64 no
longer decodes canonically and `seal` when it does; a replayed state passes the seal (the SDK does not
make a state single-use), so only the application's once-only record refuses it, and nothing is logged;
an expired state reads `unknown key` once its key is retired. A cross-principal mutant goes back under another
principal of the same header (or with another lead's OAuth token, whose subject differs), so `principal`;
`principal drift` would mean a round went without the header (or with a token that names no subject)."""

OVERSIZE_CHARS: Final = 1 << 20
"""An oversize mutant's length: 1 MiB of base64url text."""

POOL_SIZE: Final = 16
"""Recent states kept per tool for the swap classes: enough to find one of other arguments, bounded."""

_PREFIX: Final = "v1."
_KID_LEN: Final = 4
_B64URL: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_STANDARD: Final = str.maketrans("-_", "+/")


class MutantAnswer(StrEnum):
    """What the server did with a mutant: only `rejected` is right."""

    REJECTED = "rejected"  # -32602 (or the class's own refusal, see `answer_of`)
    ACCEPTED = "accepted"  # the tool ran on it: completed, or a tool error
    SERVER_ERROR = "server_error"  # HTTP 5xx, -32603, or no answer before the client's timeout
    OTHER = "other"  # anything else (a transport error under chaos, another code, the question asked afresh)


FINDINGS: Final = frozenset({MutantAnswer.ACCEPTED, MutantAnswer.SERVER_ERROR})
"""The answers that fail `no_mutant_accepted`."""


@dataclass(frozen=True)
class Mutant:
    """A mutated requestState, ready to send; `detail` and `length` are all the journal may keep of it."""

    mutation: Mutation
    value: object
    detail: str

    @property
    def length(self) -> int:
        """Characters of the value as sent: the string's length, or its JSON's."""
        if isinstance(self.value, str):
            return len(self.value)
        return len("null" if self.value is JSON_NULL else json.dumps(self.value))


# --- the classes that edit the token itself ----------------------------------------------------------


def mutate_token(mutation: Mutation, state: str, rng: RandomStream) -> Mutant:
    """A mutant of `state` for the classes that only edit the token (no other call needed)."""
    edit = _TOKEN_EDITS[mutation]
    value, detail = edit(state, rng)
    return Mutant(mutation, value, detail)


def _sealed(state: str) -> bytes | None:
    """The bytes of an SDK token (`v1.` + base64url), None for any other format."""
    if not state.startswith(_PREFIX):
        return None
    text = state[len(_PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return None
    return raw if len(raw) > _KID_LEN else None


def _token(raw: bytes) -> str:
    return _PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _bit_flip(state: str, rng: RandomStream) -> tuple[object, str]:
    raw = _sealed(state)
    if raw is None:  # not the SDK's format: change one character instead
        position = rng.randrange(len(state))
        other = rng.choice([c for c in _B64URL if c != state[position]])
        return state[:position] + other + state[position + 1:], f"character {position} of {len(state)}"
    bit = rng.randrange(_KID_LEN * 8, len(raw) * 8)  # after the key id: inside nonce, ciphertext or tag
    flipped = bytearray(raw)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return _token(bytes(flipped)), f"bit {bit} of {len(raw) * 8}"


def _truncate(state: str, rng: RandomStream) -> tuple[object, str]:
    keep = rng.randrange(1, len(state)) if len(state) > 1 else 0
    return state[:keep], f"cut to {keep} of {len(state)}"


def _extend(state: str, rng: RandomStream) -> tuple[object, str]:
    extra = rng.randint(1, 8)
    return state + "".join(rng.choice(_B64URL) for _ in range(extra)), f"{extra} characters appended"


def _re_encode(state: str, rng: RandomStream) -> tuple[object, str]:
    if _sealed(state) is None:
        return base64.b64encode(state.encode()).decode(), "base64 of the whole token"
    padding = "=" * (-(len(state) - len(_PREFIX)) % 4 or 4)  # always some: a token of no -/_ must change too
    if rng.random() < 0.5:
        return state.translate(_STANDARD) + padding, "standard alphabet, padded"
    return state + padding, "padding added"


def _empty(state: str, rng: RandomStream) -> tuple[object, str]:
    return "", "empty string"


def _non_string(state: str, rng: RandomStream) -> tuple[object, str]:
    kind = rng.choice(("number", "object", "array", "null", "bool"))
    value: object = {"number": rng.randint(0, 2**31), "object": {"v": 1, "s": "x"}, "array": ["v1"],
                     "null": JSON_NULL, "bool": rng.random() < 0.5}[kind]
    return value, kind


def _oversize(state: str, rng: RandomStream) -> tuple[object, str]:
    raw = _sealed(state)
    if raw is None:
        return state + "A" * max(0, OVERSIZE_CHARS - len(state)), "padded to 1 MiB"
    grown = raw + rng.randbytes(max(0, (OVERSIZE_CHARS - len(_PREFIX)) * 3 // 4 - len(raw)))
    return _token(grown), "sealed part grown to 1 MiB"


_TOKEN_EDITS = {
    Mutation.BIT_FLIP: _bit_flip,
    Mutation.TRUNCATE: _truncate,
    Mutation.EXTEND: _extend,
    Mutation.RE_ENCODE: _re_encode,
    Mutation.EMPTY: _empty,
    Mutation.NON_STRING: _non_string,
    Mutation.OVERSIZE: _oversize,
}
TOKEN_MUTATIONS: Final = frozenset(_TOKEN_EDITS)
"""The classes `mutate_token` makes from the state alone."""


# --- what a run can and cannot send ------------------------------------------------------------------


# --- the answer, judged -------------------------------------------------------------------------------


INTERNAL_ERROR: Final = -32603


def answer_of(mutant: Mutant, outcome: str, http_status: int | None, error_code: int | None) -> MutantAnswer:
    """What the server's answer to a mutant counts as (`outcome`: a `harness.mrtr.Outcome` value).

    Two classes have a right answer besides -32602. A replayed state passes the seal
    (the SDK does not make a state single-use), so the application's once-only record
    must refuse it with a tool error; a completed replay is a finding. And an explicit
    `null` counts, in the SDK, as no state at all: the server asks afresh (a first round).
    """
    if outcome == "invalid_state":
        return MutantAnswer.REJECTED
    if mutant.mutation is Mutation.REPLAY_COMPLETED and outcome == "tool_error":
        return MutantAnswer.REJECTED
    if mutant.value is JSON_NULL and outcome == "input_required":
        return MutantAnswer.REJECTED
    if outcome in ("complete", "tool_error"):
        return MutantAnswer.ACCEPTED
    if outcome == "timeout" or (http_status is not None and http_status >= 500) or error_code == INTERNAL_ERROR:
        return MutantAnswer.SERVER_ERROR
    return MutantAnswer.OTHER


# --- states of other calls ----------------------------------------------------------------------------


@dataclass
class StatePool:
    """Recent first-round states per tool, with their arguments: where the swap classes take another call's state.

    One per load process, bounded (`POOL_SIZE` per tool), fed by every fuzz flow's first
    round. It also holds the foreign-key state, sealed once under a key no deployment has.
    """

    size: int = POOL_SIZE
    by_tool: dict[str, deque[tuple[float, str, dict[str, Any]]]] = field(default_factory=dict)
    _foreign: str | None = None

    def add(self, tool: str, state: str, arguments: Mapping[str, Any]) -> None:
        self.by_tool.setdefault(tool, deque(maxlen=self.size)).append((time.time(), state, dict(arguments)))

    def other_arguments(self, tool: str, arguments: Mapping[str, Any], rng: RandomStream,
                        max_age: float) -> str | None:
        """A state this tool minted for other arguments less than `max_age` seconds ago, if the pool holds one.

        Fresh ones only: the SDK checks the expiry before the binding, so a state past its
        TTL would be refused as `expired` and the swap would test nothing.
        """
        since = time.time() - max_age
        others = [state for t, state, used in self.by_tool.get(tool, ()) if used != arguments and t > since]
        return rng.choice(others) if others else None

    def other_tool(self, tool: str, rng: RandomStream, max_age: float) -> str | None:
        """A state another tool minted less than `max_age` seconds ago, if the pool holds one."""
        since = time.time() - max_age
        others = [state for name, states in sorted(self.by_tool.items()) if name != tool
                  for t, state, _ in states if t > since]
        return rng.choice(others) if others else None

    def foreign_state(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """A well-formed state for this call, sealed with the SDK's own codec under a fresh key nobody else has.

        Sealed once per load process (the first flow that needs it pays the SDK import;
        a test checks the load process imports no server code at start-up).
        """
        if self._foreign is None:
            from mcp.server.request_state import AESGCMRequestStateCodec

            from harness.mrtr.keys import new_key

            now = int(time.time())
            digest = hashlib.sha256(json.dumps(dict(arguments), sort_keys=True).encode()).hexdigest()
            envelope = {"v": 1, "iat": now, "exp": now + 600, "m": "tools/call", "t": tool, "a": digest, "s": "",
                        "aud": None, "p": None}
            codec = AESGCMRequestStateCodec([new_key()])
            self._foreign = codec.seal(json.dumps(envelope, separators=(",", ":")).encode())
        return self._foreign
