"""What a valid scenario asks that its target cannot honour, said before the run (warnings, not errors).

Behind one URL (a Kubernetes Service, a load balancer) the harness sees one replica.
`routing` then cannot choose where a round lands: every round goes to that URL and the
balancer chooses (the client closes the connection after each round, so it may choose
anew). And a chaos step's command, told "replica 1, index 0, this URL", acts on whichever
replica the command makes of that (the first pod, say), while the others go untouched.
Both still make a run worth having, so `mrtr-harness validate` and the run's start say
what happens instead and leave the choice to the user. So does a `race` flow's `twin` probe against
one replica, or one URL: its two calls cannot be sent to two replicas.
"""

from __future__ import annotations

from harness.config.chaos import ChaosStep
from harness.config.commands import REPLICA_PLACEHOLDERS, placeholders_in
from harness.config.durations import format_duration
from harness.config.flows import RaceFlow
from harness.config.scenario import Scenario


def cautions(scenario: Scenario) -> list[str]:
    """One sentence per thing the scenario asks that its target cannot do as written, and what happens instead."""
    target = scenario.target
    found = _one_replica_twins(scenario)
    if target.kind == "embedded" or len(target.urls) != 1:
        return found
    url = target.urls[0]
    if "routing" in scenario.load.model_fields_set:
        found.append(f"load.routing = \"{scenario.load.routing}\" cannot be honoured through one URL ({url}): every "
                     "round goes to it and the balancer behind it chooses the replica (the connection is closed "
                     "after each round, so it may choose anew); summary.json's crossed_replica_share says how "
                     "often a state crossed replicas (expect it above 0 in [expect])")
    if target.kind == "external":
        steps = [f"{step.action} at {format_duration(step.at)}" for step in scenario.chaos
                 if _names_a_replica(step, target.commands)]
        if steps:
            found.append(f"chaos through one URL ({url}): the step(s) {', '.join(steps)} act on replica 1 only "
                         "({replica} = r1, {index} = 0, {url} = that URL): whichever replica your command makes "
                         "of that (the first pod, say), while the others are never touched, and `replica = N` "
                         "cannot name another; list one URL per replica to reach each")
    return found


def _one_replica_twins(scenario: Scenario) -> list[str]:
    """A race flow's twin probe where the harness sees one replica: both calls go to it (or the balancer chooses)."""
    target = scenario.target
    one = target.replicas == 1 if target.kind != "external" else len(target.urls) == 1
    if not one or not any(isinstance(flow, RaceFlow) and "twin" in flow.probes for flow in scenario.flows):
        return []
    return ["a race flow's twin probe sends its two calls to two replicas, and the harness sees one here: both go "
            "to it (behind one URL, the balancer chooses); summary.json's races.by_probe.twin.two_replicas says "
            "how many crossed"]


def _names_a_replica(step: ChaosStep, commands: dict[str, list[str]]) -> bool:
    """Whether a step's command acts on one replica (uses {replica}, {index} or {url}) rather than on all."""
    return any(placeholders_in(argv) & REPLICA_PLACEHOLDERS for argv in step.command_argvs(commands))
