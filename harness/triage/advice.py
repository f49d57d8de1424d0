"""The on-call table: for each logged reason, its likely cause and the next step.

The on-call catalogue (README, `scenarios/on-call/`) maps each failure mode to the
reason it produces; this is the same knowledge read the other way, from the reason an engineer sees to what
to check first. Where a reason shows on some replicas only, that is itself a clue (a
deploy that reached some replicas, a ring rolled out to some, one clock), so the hint
names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.mrtr.reasons import OTHER_REASON, TAMPERING_OR_CLIENT_BUG


@dataclass(frozen=True, slots=True)
class Advice:
    cause: str
    next_step: str
    subset: str | None = None
    """What a reason seen on some replicas only points at; None where that is no clue (a client's
    bug lands wherever the balancer sends the client)."""


ADVICE: dict[str, Advice] = {
    "unknown key": Advice(
        cause="a replica got a state sealed with a key it does not hold. Harmless when it follows a correct "
              "rotation: a state sealed with the old key, answered after that key was retired (one TTL after "
              "the new key took over), had expired anyway, and the SDK checks the key before the expiry, so it "
              "reads unknown key, not expired. Otherwise: replicas on per-process (ephemeral) keys, a restart "
              "that dropped the key, a rotation that promoted the new sealing key before every replica could "
              "open it, or an old key retired before one TTL had passed",
        next_step="if it started when the old key was retired and stops within a TTL, it is the harmless case "
                  "(a person slower than the TTL): nothing to fix. Otherwise compare the sealing-key "
                  "fingerprints each replica logs at start (and its /healthz keys); give every replica the same "
                  "ring (file or environment, same representation); rotate in phases [old,new] -> [new,old] -> "
                  "[new] one TTL later, each phase on every replica first",
        subset="after a deploy, this points at per-process keys on the new replicas or a rotation rolled out out "
               "of order: those replicas do not hold the key the others seal with",
    ),
    "expired": Advice(
        cause="the lead answered after the state's TTL: the person was slower than the TTL",
        next_step="raise the TTL above the leads' think time (p95), or let the host re-ask the user when a state "
                  "expires",
        subset="a replica whose clock runs behind mints states that look old to the others; check the clocks "
               "and the TTL each replica runs with",
    ),
    "minted in the future": Advice(
        cause="a replica's clock runs more than 60 s ahead of the one that opened the state",
        next_step="fix NTP: compare `date -u` on every replica; the clock that is ahead is the minting replica's, "
                  "not the one that logs this",
        subset="their clocks run more than 60 s behind the replica that minted the states (or its clock runs "
               "ahead): compare the clocks; the replica that is ahead logs none itself",
    ),
    "audience": Advice(
        cause="replicas with different server names (the audience sealed into every state) share one key",
        next_step="give every replica of one service the same server name, or give other services other keys",
        subset="those replicas run under another server name than the ones that minted the states",
    ),
    "request binding": Advice(
        cause="the client changed the method, tool or arguments on the retry (a client bug), or a state was "
              "replayed on another call",
        next_step="find the client (client info in the request logs): a retry must repeat method, tool and "
                  "arguments exactly, and echo the state byte for byte",
    ),
    "seal": Advice(
        cause="the token was edited: tampering, or a proxy rewriting request bodies (re-encoding, truncating)",
        next_step="treat it as a security signal: check the proxies and WAFs between client and replicas, then "
                  "the client; the state must come back byte for byte",
        subset="look at the path to those replicas only (a proxy or sidecar in front of them)",
    ),
    "malformed": Advice(
        cause="not a token the SDK sealed (a placeholder, a truncated or double-encoded value): a client bug",
        next_step="fix the client: it must echo requestState exactly as received",
    ),
    "non-string requestState": Advice(
        cause="the client sent requestState as a number, object or array: a client bug",
        next_step="fix the client's serialisation: requestState is the string the server sent",
    ),
    "codec error": Advice(
        cause="the server's own codec raised while opening the state (the SDK failed closed)",
        next_step="read the exception logged just before it (`requestState codec raised during unseal`); fix the "
                  "codec or what it depends on (a KMS, a secret store)",
        subset="those replicas run another codec version or cannot reach what it depends on",
    ),
    "principal drift": Advice(
        cause="identity changed between rounds: a state bound to a user came back without one, or the reverse "
              "(credentials dropped on the retry, or another auth path)",
        next_step="check that the retry carries the same credentials and that every replica runs the same auth "
                  "middleware",
    ),
    "principal": Advice(
        cause="identity changed between rounds: another user retried the state (a token refreshed to another "
              "subject, or a state shared between users)",
        next_step="check how each replica derives the principal (bind_principal) and whether the client switches "
                  "accounts mid-flow",
    ),
    "principal binding error": Advice(
        cause="the server's bind_principal raised or returned a non-string (the SDK failed closed)",
        next_step="read the exception logged just before it; fix bind_principal",
        subset="those replicas run another bind_principal or auth set-up",
    ),
    OTHER_REASON: Advice(
        cause="a reason this harness does not know (a newer SDK, or a custom message): its text is shown as logged",
        next_step="read the replica's line itself, then teach harness/mrtr/reasons.py the new reason",
    ),
}


def advice_for(reason: str) -> Advice:
    return ADVICE.get(reason, ADVICE[OTHER_REASON])


def means_tampering_or_client_bug(reason: str) -> bool:
    return reason in TAMPERING_OR_CLIENT_BUG


def subset_hint(reason: str, seen_on: Sequence[str], known: Sequence[str]) -> str | None:
    """A hint when `reason` shows on some of the known replicas only and that means something; else None."""
    subset = advice_for(reason).subset
    seen = [replica for replica in known if replica in seen_on]
    if subset is None or len(known) < 2 or not seen or len(seen) == len(known):
        return None
    return f"only on {', '.join(seen)} of {len(known)} replicas: {subset}"
