"""Before a run reaches beyond the embedded shop: ask the user in the call itself (MRTR); no yes, no run.

Asked about: every command the scenario would execute (`[target.commands]`, a `command`
chaos step and its rollback, `[target.auth] kind = "command"`, `logs = ["command:..."]`),
each named as the scenario writes it, and everything that is not the embedded shop (an
external target's URLs, loopback ones too: a port-forward reaches a real cluster; a Docker
deployment; a tokens file; a client secret's endpoint): `harness.assistant.plan.beyond_the_shop`.
And, by `harness.config.remote`, the hosts chaos or fuzzing would break: those of the
target's URLs that are not loopback and that the scenario's `[target] allow` does not list.
The run tool's parameters are filled by the SDK's resolvers: `breaking_of` reads them, and
`ask_to_start` returns the form (`Elicit`) when there are any. On a 2026-07-28 connection
the SDK answers the first round with `input_required` (the form in `inputRequests`, its
progress sealed in `requestState`), and the client's retry carries the user's answer in
`inputResponses`; on a 2025-era session it asks over the session. The answer is pinned to
the question as it was worded, commands and hosts and all: a scenario edited between the
rounds to run another command or name other hosts is asked again. Only a yes lets the run
start, with exactly those hosts as `--allow-host`.
"""

from __future__ import annotations

import json
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
    """What a run would do that needs the user's yes: the words for what breaks and the hosts it breaks off this
    machine without anyone's leave, and what it runs or touches beyond the embedded shop."""

    what: str
    hosts: tuple[str, ...]
    reaches: tuple[str, ...] = ()

    @property
    def asks(self) -> bool:
        """Whether the run needs the user's yes."""
        return bool(self.hosts or self.reaches)


def settings_of(ctx: Context) -> ServerSettings:
    """The server's settings, which its lifespan hands every request."""
    settings = ctx.request_context.lifespan_context
    assert isinstance(settings, ServerSettings)
    return settings


def breaking_of(scenario: str, duration: str | None, seed: int | None, ctx: Context) -> Breaking:
    """Resolver: the remote hosts the run would break that nobody allowed (none when it would be refused anyway)."""
    try:
        plan = plan_run(scenario, duration, seed, settings_of(ctx))
    except Refused:
        return Breaking("", ())
    return Breaking(plan.breaking, tuple(plan.unallowed), tuple(plan.reaches))


def ask_to_start(scenario: str,
                 breaking: Annotated[Breaking, Resolve(breaking_of)]) -> Elicit[StartOnRemote] | None:
    """Resolver: the question, when the run would run a command, reach beyond the embedded shop or break a remote
    host nobody allowed; else nothing to ask."""
    if not breaking.asks:
        return None
    lines = [f"Start {json.dumps(scenario)}?"]
    if breaking.reaches:
        lines += ["It would reach beyond the embedded shop:", *(f"- {line}" for line in breaking.reaches)]
    if breaking.hosts:
        hosts = ", ".join(breaking.hosts)
        them = "it" if len(breaking.hosts) == 1 else "them"
        lines.append(f"It would act with {breaking.what} on {hosts}, which {'is' if them == 'it' else 'are'} not "
                     f"this machine and not in its [target] allow: yes allows {them} (--allow-host).")
    lines.append("Yes starts the run; no starts nothing.")
    return Elicit("\n".join(lines), StartOnRemote)


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
    needs = []
    if breaking.reaches:
        needs.append(f"what it runs and reaches beyond the embedded shop ({'; '.join(breaking.reaches)})")
    if breaking.hosts:
        needs.append(f"{breaking.what} against remote host {', '.join(breaking.hosts)} (or add the host to the "
                     "scenario's [target] allow)")
    return (f"not started: {' and '.join(needs)} needs the user's yes, and the answer was {answer}; nothing was run "
            "or sent")
