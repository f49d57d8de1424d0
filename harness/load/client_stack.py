"""The client stack of one load process, built one way for the local runner and for every Locust worker.

Router (where each round lands, seeded per worker), transport (connection pools that
hold nothing across a lead's think time), an MRTR client per host (`[[hosts]]`: what each
declares; a 2025 host gets the SDK's own client, `harness.mrtr.legacy`, imported only
then), and the `FlowEnv` every flow
shares, whose sleeps (an agent's lead thinking, a page visit) end on the process's
wake-ups where they can (`harness.processes.timers`). With `[target.auth]`, every principal's token is
fetched here, before the load starts (`harness.auth`). The shop's orders are loaded only when the
scenario runs the shop's own flows: a `call` or `fuzz` flow against another server's
tool has no use for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.config.hosts import Host
from harness.config.scenario import Scenario
from harness.journal.writer import Journal
from harness.leads.lead import capabilities
from harness.load.flow import FlowEnv, HostClient, RequestHook, url_labels
from harness.load.output_contracts import OutputContracts
from harness.load.seeding import stream
from harness.metrics.registry import RunMetrics
from harness.mrtr.client import MrtrClient
from harness.mrtr.routing import Router
from harness.mrtr.transport import Transport
from harness.processes.timers import SLACK, Timers
from harness.telemetry import switch
from harness.telemetry.marks import Sampling

if TYPE_CHECKING:
    from harness.auth.keeper import LeadTokens
    from harness.config.auth import TargetAuth
    from harness.load.shop_orders import ShopOrders
    from harness.mrtr.legacy import LegacyLoop
    from harness.mrtr.stdio import StdioServers


def build_flow_env(scenario: Scenario, urls: Sequence[str], labels: Sequence[str], journal: Journal,
                   run_metrics: RunMetrics, *, worker: int = 0, fire_request: RequestHook | None = None,
                   auth_url: str | None = None, stdio: StdioServers | None = None) -> FlowEnv:
    """Everything the flows of one load process share (worker 0 is the local runner). `auth_url`: the target's own
    URL, whose protected-resource metadata names it (the load's `urls` may be fault proxies in front of it).
    With spans exported, its flows draw trace ids and journal them; the run's live fold exports the spans.
    `stdio`: a stdio target's processes, whose rounds the SDK's client sends over their pipes (`harness.mrtr.stdio`)."""
    router = Router(list(urls), scenario.load.routing, rng=stream(scenario.seed, "worker", worker, "router"))
    transport = Transport(read_timeout=scenario.load.timeout, reuse_connections=len(urls) > 1)
    target = scenario.target
    principal = {target.principal_header: target.principal} if target.principal_header is not None else None
    tokens = _lead_tokens(target.auth, auth_url or urls[0], run_metrics) if target.auth is not None else None
    hosts: dict[str, tuple[Host, HostClient]] = {}
    legacy_loop: LegacyLoop | None = None
    for host in scenario.host_list:
        if host.legacy:
            from harness.mrtr.legacy import LegacyClient, LegacyLoop  # the SDK's client, only for a 2025 host

            legacy_loop = legacy_loop or LegacyLoop()
            hosts[host.name] = (host, LegacyClient(router, legacy_loop, elicitation=bool(host.elicitation),
                                                   timeout=scenario.load.timeout, headers=principal,
                                                   credentials=tokens))
        else:
            hosts[host.name] = (host, MrtrClient(router, capabilities=capabilities(scenario.leads, host.elicitation),
                                                 timeout=scenario.load.timeout, transport=transport, headers=principal,
                                                 retry_lost_answers=scenario.load.retry_lost_answers,
                                                 credentials=tokens))
    contracts: OutputContracts | None = None
    if stdio is not None:
        from harness.mrtr.stdio import StdioClient  # the SDK's client, only for a stdio target

        over_pipes = StdioClient(stdio, router)
        hosts = {host.name: (host, over_pipes) for host in scenario.host_list}
        contracts = OutputContracts(over_pipes.read_tools)
    modern = [client for host, client in hosts.values() if isinstance(client, MrtrClient)]
    client = modern[0] if modern else MrtrClient(router, capabilities=capabilities(scenario.leads),
                                                 timeout=scenario.load.timeout, transport=transport,
                                                 headers=principal, credentials=tokens)
    return FlowEnv(scenario, client, journal, run_metrics, _shop_orders(scenario),
                   url_labels(list(urls), list(labels)), fire_request=fire_request, sleep=Timers(SLACK).sleep,
                   hosts=hosts, tokens=tokens,
                   sampling=Sampling(scenario.seed) if switch.tracing_on() else None,
                   contracts=contracts, on_flow_end=stdio.flow_ended if stdio is not None else None)


def _lead_tokens(auth: TargetAuth, url: str, run_metrics: RunMetrics) -> LeadTokens:
    """Every principal's token, fetched now; the OAuth client (Authlib) is imported only by runs that use it."""
    from harness.auth.token_sources import lead_tokens

    return lead_tokens(auth, url, run_metrics.token_refreshed)


def _shop_orders(scenario: Scenario) -> ShopOrders | None:
    """The shop's orders, imported only for flows whose kind says they need them."""
    if not any(flow.needs_shop_orders() for flow in scenario.flows):
        return None
    from harness.load.shop_orders import ShopOrders
    from harness.shop.orders import build_orders

    return ShopOrders(build_orders())
