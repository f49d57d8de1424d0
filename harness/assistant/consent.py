"""Before a run breaks a host that is not this machine: ask the user in the call itself (MRTR); no yes, no run.

`harness.config.remote` names the hosts: those of the target's URLs that are not loopback
and that the scenario's `[target] allow` does not list, when it has chaos or fuzzing. The
run tool's parameters are filled by the SDK's resolvers: `breaking_of` reads them, and
`ask_to_start` returns the form (`Elicit`) when there are any. On a 2026-07-28 connection
the SDK answers the first round with `input_required` (the form in `inputRequests`, its
progress sealed in `requestState`), and the client's retry carries the user's answer in
`inputResponses`; on a 2025-era session it asks over the session. The answer is pinned to
the question as it was worded, hosts and all: a scenario edited between the rounds to name
other hosts is asked again. Only a yes lets the run start, with exactly those hosts as
`--allow-host`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, Resolve
from pydantic import BaseModel, Field

from harness.assistant.plan import Refused, ServerSettings, plan_run


class StartOnRemote(BaseModel):
    """The form the user answers: one yes or no."""

    start: bool = Field(title="Start", description="yes: start the run with these hosts allowed; no: start nothing")


@dataclass(frozen=True)
class Breaking:
    """What a run would break off this machine without anyone's leave: the words for it, and the hosts."""

    what: str
    hosts: tuple[str, ...]


def settings_of(ctx: Context) -> ServerSettings:
    """The server's settings, which its lifespan hands every request."""
    settings = ctx.request_context.lifespan_context
    assert isinstance(settings, ServerSettings)
    return settings


def breaking_of(scenario: str, duration: str | None, seed: int | None, ctx: Context) -> Breaking:
    """Resolver: the remote hosts the run would break that nobody allowed (none when it would be refused anyway)."""
    try:
        plan = plan_run(scenario, duration, seed, settings_of(ctx).max_duration)
    except Refused:
        return Breaking("", ())
    return Breaking(plan.breaking, tuple(plan.unallowed))


def ask_to_start(scenario: str,
                 breaking: Annotated[Breaking, Resolve(breaking_of)]) -> Elicit[StartOnRemote] | None:
    """Resolver: the question, when the run would break a remote host nobody allowed; else nothing to ask."""
    if not breaking.hosts:
        return None
    hosts = ", ".join(breaking.hosts)
    them = "it" if len(breaking.hosts) == 1 else "them"
    return Elicit(f"Start {breaking.what} against {hosts}? {scenario} would act on {hosts}, which "
                  f"{'is' if them == 'it' else 'are'} not this machine and not in its [target] allow. Yes starts "
                  f"the run with {them} allowed (--allow-host); no starts nothing.", StartOnRemote)


Consent = Annotated[ElicitationResult[StartOnRemote], Resolve(ask_to_start)]
"""The run tool's parameter the user's answer fills (accepted with no data: nothing was asked)."""
Hosts = Annotated[Breaking, Resolve(breaking_of)]
"""The run tool's parameter the hosts fill: the same ones the question named, in the same round."""


def agreed(consent: ElicitationResult[StartOnRemote]) -> bool:
    """A yes: the form accepted with start = true."""
    return isinstance(consent, AcceptedElicitation) and consent.data is not None and consent.data.start


def refusal(breaking: Breaking, consent: ElicitationResult[StartOnRemote]) -> str:
    """Why the run was not started, in the user's terms."""
    answer = "no" if isinstance(consent, AcceptedElicitation) else consent.action
    hosts = ", ".join(breaking.hosts)
    return (f"not started: {breaking.what} against remote host {hosts} needs the user's yes, and the answer was "
            f"{answer}; nothing was sent (or add the host to the scenario's [target] allow)")
