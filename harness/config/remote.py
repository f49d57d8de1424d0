"""Care with remote targets: the rules a scenario must keep before it breaks or sends secrets off this machine.

Two rules, checked by `validate`, `run` and `capacity` before any traffic (exit 2 when one is
broken), each said in one line per host or URL:

- chaos (any `[[chaos]]` action) and fuzzing (a `kind = "fuzz"` flow: its kind's `breaks_target`) against a host that is
  not loopback need that host in `[target] allow` or `--allow-host HOST`: a scenario copied
  from a staging example must not restart or fuzz a deployment nobody named;
- a bearer token (any `[target.auth]`) goes to the target's URLs, and a client secret to a
  token endpoint, only over https, or over plain http when every URL it would be sent to is
  loopback (or `[target.auth] allow_http` says the network is private). A token endpoint
  found by discovery is checked when it is found (`harness.auth.discovery`), by the same rule.

Loopback is 127.0.0.0/8, ::1 and `localhost`; an embedded target is loopback (the harness
starts it here). The hosts are those of the target's URLs (`urls`: the replicas' or a
balancer's); an OAuth token or discovery URL is no chaos target.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from harness.config.strict import ScenarioError
from harness.config.urls import is_loopback, normal_host, secure_transport

if TYPE_CHECKING:
    from harness.config.scenario import Scenario
    from harness.config.target import TargetConfig

ALLOW_HINT = "add it to [target] allow or pass --allow-host"
HTTP_HINT = "use https, or set [target.auth] allow_http = true on a private network"


@dataclass(frozen=True)
class Verdict:
    """One rule applied to one host or URL: what applies, and whether the scenario may go ahead."""

    line: str
    allowed: bool


@dataclass(frozen=True)
class _HostVerdict(Verdict):
    """The chaos and fuzzing rule applied to one host: the verdict, and the host it names."""

    host: str


def remote_hosts(target: TargetConfig) -> list[str]:
    """The hosts of the target's URLs that are not loopback, in order, each once (none for an embedded target)."""
    if target.kind == "embedded":
        return []
    hosts: list[str] = []
    for url in target.urls:
        host = urlsplit(url).hostname
        if host is not None and not is_loopback(url) and normal_host(host) not in hosts:
            hosts.append(normal_host(host))
    return hosts


def verdicts(scenario: Scenario, allow_hosts: Iterable[str] = ()) -> list[Verdict]:
    """Every rule that applies to the scenario's target, one line each; none for a loopback target."""
    return [*_breaking(scenario, allow_hosts), *_credentials(scenario.target)]


def check(scenario: Scenario, allow_hosts: Sequence[str] = (), source: str = "") -> list[str]:
    """The lines of the rules that apply and hold; ScenarioError (exit 2) naming each one broken."""
    found = verdicts(scenario, allow_hosts)
    refused = [verdict.line for verdict in found if not verdict.allowed]
    if refused:
        where = f"{source}: " if source else ""
        raise ScenarioError("\n".join(where + line for line in refused))
    return [verdict.line for verdict in found]


def breaking(scenario: Scenario) -> str:
    """What of the scenario breaks its target: "chaos", "fuzzing", "chaos and fuzzing", or "" for neither.

    Its flows' part is what their kinds say they do to a target (`FlowKind.breaks_target`)."""
    flows = [flow.breaks_target for flow in scenario.flows if flow.breaks_target]
    return " and ".join([*(["chaos"] if scenario.chaos else []), *dict.fromkeys(flows)])


def unallowed_hosts(scenario: Scenario, allow_hosts: Iterable[str] = ()) -> list[str]:
    """The remote hosts chaos or fuzzing would act on that neither `[target] allow` nor `allow_hosts` names: the
    ones a run refuses, and the ones `mrtr-harness mcp` asks the user about before it starts one."""
    return [verdict.host for verdict in _breaking(scenario, allow_hosts) if not verdict.allowed]


def _breaking(scenario: Scenario, allow_hosts: Iterable[str]) -> list[_HostVerdict]:
    """Chaos and fuzzing: each remote host, allowed by the scenario, by the command line, or refused."""
    what = breaking(scenario)
    if not what:
        return []
    in_file = {normal_host(host) for host in scenario.target.allow}
    on_line = {normal_host(host) for host in allow_hosts}
    found = []
    for host in remote_hosts(scenario.target):
        head = f"{what} against remote host {host}"
        if host in in_file:
            found.append(_HostVerdict(f"{head}: allowed by [target] allow", True, host))
        elif host in on_line:
            found.append(_HostVerdict(f"{head}: allowed by --allow-host", True, host))
        else:
            found.append(_HostVerdict(f"{head}: refused: {ALLOW_HINT}", False, host))
    return found


def _credentials(target: TargetConfig) -> list[Verdict]:
    """Bearer tokens to each remote target URL, and a client secret to its token endpoint: over https, over plain
    http by `allow_http`, or refused."""
    auth = target.auth
    if auth is None or target.kind == "embedded":
        return []
    found = [_secret_to(f"bearer tokens to remote host {host}", _hosts_urls(target.urls, host), target.urls,
                        auth.allow_http) for host in remote_hosts(target)]
    if auth.kind != "client-credentials":
        return found
    if auth.token_url is not None:
        if not is_loopback(auth.token_url):
            found.append(_secret_to(f"client secret to token endpoint {auth.token_url}", [auth.token_url], (),
                                    auth.allow_http))
    elif remote_hosts(target):
        found.append(Verdict("client secret to the discovered token endpoint: checked when found (https, or plain "
                             "http only if every URL is loopback"
                             f"{' or by [target.auth] allow_http' if auth.allow_http else ''})", True))
    return found


def _hosts_urls(urls: Sequence[str], host: str) -> list[str]:
    return [url for url in urls if normal_host(urlsplit(url).hostname or "") == host]


def _secret_to(head: str, urls: Sequence[str], others: Sequence[str], allow_http: bool) -> Verdict:
    """Over https when every one of `urls` may have the secret; else allowed by `allow_http`, or refused naming the
    plain-http ones."""
    plain = [url for url in urls if not secure_transport(url, *others)]
    if not plain:
        return Verdict(f"{head}: over https", True)
    if allow_http:
        return Verdict(f"{head}: plain http, allowed by [target.auth] allow_http", True)
    return Verdict(f"{head}: refused: plain http off this machine ({', '.join(plain)}); {HTTP_HINT}", False)


ALLOW_HOST_HELP = ("a host of the target's URLs, not loopback, that chaos and fuzzing may act on, as [target] allow "
                   "lists them (repeatable); chaos or fuzzing against a host named in neither is refused (exit 2, "
                   "nothing sent)")


def add_allow_host(parser: argparse.ArgumentParser) -> None:
    """`--allow-host HOST` (repeatable), on every command that starts a run and on `validate`."""
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST", help=ALLOW_HOST_HELP)


def say_remote(scenario: Scenario, allow_hosts: Sequence[str], source: str) -> None:
    """A run's start: ScenarioError (exit 2) before any traffic when a rule is broken, else each rule that applies on
    stderr, so the run's log shows what it was allowed to do and why."""
    for line in check(scenario, allow_hosts, source):
        print(f"mrtr-harness: {source}: remote: {line}", file=sys.stderr)
