"""One simulated support lead: what they decide each round, how long it takes, what they type.

A flow hands the lead the server's `inputRequests` and gets back a `LeadResponse`: the
decision, the modelled think time to sleep first, and the `inputResponses` to send on
the retry. The lead never sleeps or talks to the network; the caller does both, so this
stays pure and a seed reproduces it.

Draw order per round, fixed so one stream state always gives the same round:
  1. the decision (one `rng.random()`), applied to every question of the round;
  2. the think time (`profile.think.sample`);
  3. for an accept, per request in `input_requests` order: a form's answers
     (`answer_form`) or a URL's completion delay (`profile.url_completion.sample`).
Requests are checked before any draw, so a bad request consumes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from harness.config.leads import LeadProfile
from harness.config.think import RandomStream
from harness.leads.answers import UnanswerableRequest, UnanswerableSchema, answer_form

ELICITATION = "elicitation/create"


class Action(StrEnum):
    """What the lead does with a round's questions. `abandon` means no answer is ever sent."""

    ACCEPT = "accept"
    DECLINE = "decline"
    CANCEL = "cancel"
    ABANDON = "abandon"


@dataclass(frozen=True, slots=True)
class LeadResponse:
    """The lead's answer to one round. A dataclass, not a model: it is built every round."""

    action: Action
    think_seconds: float
    """Modelled seconds the lead takes before answering (or walking away, for abandon)."""
    input_responses: dict[str, dict[str, Any]] | None
    """Wire `inputResponses`, keyed like the round's `inputRequests`; None when abandoned."""
    url_visits: list[tuple[str, float]] = field(default_factory=list)
    """(url, modelled seconds after the answer) for each accepted URL-mode request."""


def capabilities(profile: LeadProfile, modes: Sequence[str] = ("form", "url")) -> dict[str, Any]:
    """The client capabilities this lead's host declares, for `_meta` clientCapabilities.

    A server must not ask a mode the client did not declare (-32021): `modes` are the
    elicitation modes the host's client declares (`[[hosts]] elicitation`); none declares
    no elicitation at all, as a client with no elicitation callback does.
    """
    return {"elicitation": {mode: {} for mode in modes}} if modes else {}


class Lead:
    """A lead bound to a profile and its own random stream (see `harness.load.seeding.stream`)."""

    __slots__ = ("profile", "rng")

    def __init__(self, profile: LeadProfile, rng: RandomStream) -> None:
        self.profile = profile
        self.rng = rng

    def respond(self, input_requests: Mapping[str, Mapping[str, Any]]) -> LeadResponse:
        """Decide, think and answer one round of `inputRequests` (wire dicts).

        Raises UnanswerableRequest for a method or mode the lead cannot answer, and
        UnanswerableSchema (a subclass) when accepting a form it cannot fill validly.
        """
        modes = {key: _elicitation_mode(key, request) for key, request in input_requests.items()}
        if not modes:
            raise ValueError("no input requests: a round without questions is the caller's to retry")
        action = self._decide()
        think_seconds = self.profile.think.sample(self.rng)
        if action is Action.ABANDON:
            return LeadResponse(action, think_seconds, None)
        if action is not Action.ACCEPT:
            return LeadResponse(action, think_seconds, {key: {"action": action.value} for key in modes})
        return self._accept(input_requests, modes, think_seconds)

    def _decide(self) -> Action:
        """One uniform draw split into decline | cancel | abandon | accept, in that order."""
        u = self.rng.random()
        for action, share in (
            (Action.DECLINE, self.profile.decline),
            (Action.CANCEL, self.profile.cancel),
            (Action.ABANDON, self.profile.abandon),
        ):
            if u < share:
                return action
            u -= share
        return Action.ACCEPT

    def _accept(
        self,
        input_requests: Mapping[str, Mapping[str, Any]],
        modes: Mapping[str, str],
        think_seconds: float,
    ) -> LeadResponse:
        """Fill every form and agree to every URL of the round."""
        responses: dict[str, dict[str, Any]] = {}
        visits: list[tuple[str, float]] = []
        for key, mode in modes.items():
            params = input_requests[key]["params"]
            if mode == "url":
                responses[key] = {"action": "accept"}
                visits.append((params["url"], self.profile.url_completion.sample(self.rng)))
                continue
            try:
                content = answer_form(params["requestedSchema"], self.rng, self.profile.overrides)
            except UnanswerableSchema as error:
                raise UnanswerableSchema(f"input request {key!r}: {error}") from None
            responses[key] = {"action": "accept", "content": content}
        return LeadResponse(Action.ACCEPT, think_seconds, responses, visits)


def _elicitation_mode(key: str, request: Any) -> str:
    """Return "form" or "url" for an answerable request, or say why it is not answerable.

    Only elicitation is a person's job; sampling and roots belong to the host's model
    and filesystem, which the harness does not simulate.
    """
    if not isinstance(request, Mapping):
        raise UnanswerableRequest(f"input request {key!r} is not an object")
    method = request.get("method")
    if method != ELICITATION:
        raise UnanswerableRequest(f"input request {key!r}: a lead answers only {ELICITATION}, not {method!r}")
    params = request.get("params")
    if not isinstance(params, Mapping):
        raise UnanswerableRequest(f"input request {key!r} has no params object")
    mode = params.get("mode", "form")
    if mode == "form" and isinstance(params.get("requestedSchema"), Mapping):
        return "form"
    if mode == "url" and isinstance(params.get("url"), str):
        return "url"
    if mode in ("form", "url"):
        needs = "requestedSchema" if mode == "form" else "url"
        raise UnanswerableRequest(f"input request {key!r}: {mode} mode without {needs!r}")
    raise UnanswerableRequest(f"input request {key!r}: unknown elicitation mode {mode!r}")
