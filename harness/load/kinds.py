"""Every flow kind, by its scenario model, and the one function that runs a flow of any kind to its end.

Adding a flow kind: its model in `harness.config.flows`, its steps in a module of this
package, one line in `FLOW_KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent

from harness.config.flows import AdversarialFlow, CallFlow, FlowSpec, FuzzFlow, PayoutFlow, RefundFlow, ReturnFlow
from harness.config.think import RandomStream
from harness.journal.records import FlowOutcome, FlowStarted, RecordType
from harness.load.flow import Flow, FlowEnv, FlowFailed, finish, generic_call
from harness.load.fuzz import fuzz
from harness.load.shop_flows import adversarial, payout, record_return, refund
from harness.mrtr.client import Steps, drive
from harness.vocabulary import MODERN_REVISION

FlowKind = Callable[[Flow, Any, float | None], Steps[FlowOutcome]]
"""A flow kind's steps: the flow, its scenario model, its intended start (None: now) -> its outcome."""

FLOW_KINDS: dict[type, FlowKind] = {
    RefundFlow: refund,
    ReturnFlow: record_return,
    PayoutFlow: payout,
    CallFlow: generic_call,
    AdversarialFlow: adversarial,
    FuzzFlow: fuzz,
}


def flow_steps(env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream,
               scheduled: float | None = None, late: bool = False,
               in_flight: dict[str, Flow] | None = None, lead: int = 0) -> Steps[FlowOutcome]:
    """One flow to its end, as steps (it yields each wait), journaling exactly one outcome for it.

    While it runs it is in `in_flight` (the load plan's table), so a run that stops with
    flows still waiting on their leads journals their ends itself, in bulk (`interrupt`),
    instead of waiting for each flow to be stopped; a flow whose end is already journaled
    writes nothing more when it is stopped (its greenlet killed mid-round, or its parked
    steps closed).
    """
    flow = Flow(env, spec, flow_id, rng, late=late, lead=lead)
    started = FlowStarted(type=RecordType.START, t=flow.started, flow_id=flow_id, flow=flow.kind,
                          scheduled=scheduled, late=late, host=flow.host.name)
    if flow.host.protocol != MODERN_REVISION:
        started["protocol"] = flow.host.protocol
    if flow.trace is not None:
        started["trace_id"], started["lead"] = flow.trace.trace_text, lead
    env.journal.write(started)
    env.run_metrics.flow_started(flow.kind)
    if in_flight is not None:
        in_flight[flow_id] = flow
    outcome = FlowOutcome.INTERRUPTED
    try:
        outcome = yield from FLOW_KINDS[type(spec)](flow, spec, scheduled)
    except FlowFailed as failed:
        outcome = failed.outcome
    except (gevent.GreenletExit, GeneratorExit):
        outcome = FlowOutcome.INTERRUPTED
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a flow must be an outcome, not vanish with its greenlet
        flow.facts["error"] = f"{type(exc).__name__}: {exc}"
        outcome = FlowOutcome.ERROR
    finally:
        if in_flight is not None:
            in_flight.pop(flow_id, None)
        if not flow.ended:
            finish(env, flow, outcome)
    return outcome


def run_flow(env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream,
             scheduled: float | None = None, late: bool = False,
             in_flight: dict[str, Flow] | None = None, lead: int = 0) -> FlowOutcome:
    """Run one flow to its end in the calling greenlet, sleeping its waits (the closed model's agents)."""
    return drive(flow_steps(env, spec, flow_id, rng, scheduled, late, in_flight, lead), env.sleep)


