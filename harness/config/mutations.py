"""The fuzzer's mutation classes as a scenario names them, and which of them a flow can send.

How each is made and judged is the fuzzer's (`harness.load.mutations`); the scenario needs
only the names, to validate a `fuzz` flow before anything starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Final


class Mutation(StrEnum):
    """One way of sending a requestState back wrong (the `mutations` of a `fuzz` flow)."""

    BIT_FLIP = "bit-flip"  # one bit flipped inside the sealed part (nonce, ciphertext, tag)
    TRUNCATE = "truncate"  # cut short
    EXTEND = "extend"  # characters appended
    RE_ENCODE = "re-encode"  # the same bytes in the standard base64 alphabet, or with padding
    EMPTY = "empty"  # ""
    NON_STRING = "non-string"  # a number, object, array, null or boolean
    OVERSIZE = "oversize"  # 1 MiB
    SWAP_FLOW = "swap-flow"  # a state minted for another flow of the same tool (other arguments)
    SWAP_TOOL = "swap-tool"  # a state minted by another tool
    SWAP_ARGUMENTS = "swap-arguments"  # this state, other arguments
    REPLAY_COMPLETED = "replay-completed"  # the state of a retry that completed, sent again
    CROSS_PRINCIPAL = "cross-principal"  # this state, sent back as another principal
    FOREIGN_KEY = "foreign-key"  # a state sealed under another deployment's key
    EXPIRED = "expired"  # held past the TTL (slow: off by default)


DEFAULT_MUTATIONS: Final[tuple[Mutation, ...]] = tuple(
    mutation for mutation in Mutation if mutation is not Mutation.EXPIRED)
"""Every class but `expired`, which holds a flow for a whole TTL."""


def skipped_mutations(chosen: Sequence[Mutation], *, several_arguments: bool,
                      other_tool: bool, principal: bool) -> dict[Mutation, str]:
    """The chosen classes a flow cannot send, each with why (the reports say so, rather than count zero)."""
    skipped: dict[Mutation, str] = {}
    if Mutation.CROSS_PRINCIPAL in chosen and not principal:
        skipped[Mutation.CROSS_PRINCIPAL] = ("the harness sends no principal (give [target.auth] with principals "
                                             "of 2 or more, or [target] principal_header, the request header the "
                                             "replicas bind states to)")
    if not several_arguments:
        for mutation in (Mutation.SWAP_FLOW, Mutation.SWAP_ARGUMENTS):
            if mutation in chosen:
                skipped[mutation] = "needs two or more `arguments` to pick other arguments from"
    if not other_tool and Mutation.SWAP_TOOL in chosen:
        skipped[Mutation.SWAP_TOOL] = "needs `swap_tool`, a tool whose state the flow can mint"
    return skipped


class EnvelopeMutation(StrEnum):
    """One way of sending the JSON-RPC envelope itself wrong (the `envelope` list of a `fuzz` flow).

    What each must be answered with, by JSON-RPC 2.0 and MCP's streamable HTTP transport, is
    `harness.load.envelope.REQUIRED`; none of them reaches a tool.
    """

    INVALID_JSON = "invalid-json"  # a body cut off mid-object: -32700
    MISSING_ID = "missing-id"  # a tools/call without `id`: a notification, so 202 and no body
    DUPLICATE_ID = "duplicate-id"  # two requests in flight with one id: each answered, with that id
    OBJECT_ID = "object-id"  # `"id": {...}`: -32600
    ARRAY_ID = "array-id"  # `"id": [...]`: -32600
    FLOAT_ID = "float-id"  # `"id": 1.5`: MCP ids are strings or integers, so -32600
    HUGE_ID = "huge-id"  # an integer past 2**64: answered, with that id
    JSONRPC_1 = "jsonrpc-1.0"  # `"jsonrpc": "1.0"`: -32600
    JSONRPC_MISSING = "jsonrpc-missing"  # no `jsonrpc`: -32600
    PARAMS_ARRAY = "params-array"  # `params` by position: -32600 or -32602
    PARAMS_STRING = "params-string"  # `params` a string: -32600
    PARAMS_NULL = "params-null"  # `params` null: -32600
    OVERSIZE_BODY = "oversize-body"  # a body one byte past `envelope_body_limit`: HTTP 413


ENVELOPE_BODY_LIMIT: Final = 4 * 1024 * 1024
"""The default `envelope_body_limit`: the SDK's own (`max_request_body_size` of its streamable HTTP manager)."""
