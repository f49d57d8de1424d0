"""`[[hosts]]`: the kinds of host the leads sit behind, and what each one's client declares and speaks.

A host is the application a lead uses (a desktop app, a web chat, a bot): its client
declares the elicitation modes it can show (`[]`: none, so a server that must ask answers
-32021), speaks one protocol era (2026-07-28, stateless MRTR; or a 2025 revision, with
the `initialize` handshake and a session) and retries URL-mode questions in its own way.
Each lead (each flow) is assigned to one host by weight, from the scenario's seed. With no
`[[hosts]]` there is one host, `DEFAULT_HOST`: 2026-07-28, form and URL, retrying after
the person answered.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from harness.config.durations import PositiveDuration
from harness.config.strict import FieldProblem, Strict
from harness.vocabulary import HANDSHAKE_REVISIONS, MODERN_REVISION, ProtocolRevision

ElicitationMode = Literal["form", "url"]
BOTH_MODES: tuple[ElicitationMode, ...] = ("form", "url")


class Host(Strict):
    """One kind of host: a `[[hosts]]` entry of a scenario file."""

    name: str = Field(min_length=1, max_length=32, pattern=r"^[a-z0-9][a-z0-9_-]*$",
                      description="names the host in the journal, the summary and the `host` metric label")
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False,
                          description="its share of the leads, against the other hosts' weights")
    elicitation: list[ElicitationMode] = Field(
        default_factory=lambda: list(BOTH_MODES),
        description="the elicitation modes its client declares; [] declares none (a server that must ask "
                    "answers -32021)")
    protocol: ProtocolRevision = Field(
        default=MODERN_REVISION,
        description="2026-07-28: the harness's stateless MRTR client; a 2025 revision: the SDK's "
                    "own Client with the initialize handshake and a session, answering the "
                    "server's elicitation/create requests on its stream (it offers 2025-11-25, "
                    "the SDK's latest handshake revision); it too waits on the server no longer "
                    "than [load] timeout at a time (the lead's thinking aside) and carries the "
                    "lead's [target.auth] token, its 401 and 403 counted as auth refusals")
    url_retry: Literal["after-completion", "poll"] = Field(
        default="after-completion",
        description="URL mode: after-completion retries once the person answered; poll accepts at once and "
                    "retries every `poll_every`, whether the person finished the page or not")
    poll_every: PositiveDuration | None = Field(
        default=None, description="poll: how often it retries, modelled (default 5s)")

    @field_validator("elicitation")
    @classmethod
    def _modes_once(cls, modes: list[ElicitationMode]) -> list[ElicitationMode]:
        if len(set(modes)) != len(modes):
            raise ValueError(f"names a mode twice: {modes}; write each of form and url at most once")
        return modes

    @model_validator(mode="after")
    def _fits_protocol(self) -> Host:
        if self.poll_every is not None and self.url_retry != "poll":
            raise FieldProblem("poll_every applies to url_retry = \"poll\" only", "poll_every")
        if self.legacy:
            if self.elicitation not in ([], ["form", "url"], ["url", "form"]):
                raise FieldProblem("a 2025 host runs the SDK's own Client, which declares both modes or none: "
                                   "write elicitation = [\"form\", \"url\"] or []", "elicitation")
            if self.url_retry == "poll":
                raise FieldProblem("a 2025 host answers URL mode over its session and never polls: "
                                   "url_retry = \"poll\" applies to 2026-07-28 hosts", "url_retry")
        return self

    @property
    def legacy(self) -> bool:
        """Whether its client speaks the 2025 handshake era (the SDK's own `Client`)."""
        return self.protocol in HANDSHAKE_REVISIONS

    @property
    def polls(self) -> bool:
        return self.url_retry == "poll"

    @property
    def poll_seconds(self) -> float:
        """Modelled seconds between its URL-mode retries when it polls."""
        return self.poll_every if self.poll_every is not None else DEFAULT_POLL_EVERY


DEFAULT_POLL_EVERY = 5.0
"""Modelled seconds between a polling host's URL-mode retries when `poll_every` is not given."""

DEFAULT_HOST = Host(name="default")
"""The one host of a scenario with no `[[hosts]]`: 2026-07-28, form and URL, retrying after the person answered."""


def check_hosts(hosts: list[Host]) -> list[Host]:
    """Host names are labels: each at most once."""
    seen: set[str] = set()
    for index, host in enumerate(hosts):
        if host.name in seen:
            raise FieldProblem(f"host {host.name!r} is named twice: each host needs its own name", index, "name")
        seen.add(host.name)
    return hosts
