"""Every flow kind's steps, checked against the registry of kinds, and the one function that runs a flow of any kind.

A flow kind is its model (`harness.config.flows`, registered in `FLOW_KINDS`) and its steps
(registered with `@steps_of` in `FLOW_STEPS`, in a module of this package that this one imports:
the call flow's in `flow`, the shop's in `shop_flows`, the fuzzer's in `fuzz`, the race probes' in `races`).
Importing this module refuses a kind declared without steps, or steps of a model that is no kind.
"""

from __future__ import annotations

import gevent

from harness.config.flows import FLOW_KINDS, FlowSpec
from harness.config.think import RandomStream
from harness.journal.records import FlowOutcome, FlowStarted, RecordType
from harness.load import fuzz, races, shop_flows  # noqa: F401 - imported for their steps, which register themselves
from harness.load.flow import FLOW_STEPS, Flow, FlowEnv, FlowFailed, finish
from harness.mrtr.client import Steps, drive
from harness.vocabulary import MODERN_REVISION


def unmatched() -> list[str]:
    """Kinds declared without steps, and steps registered for a model that is no kind: a kind is both halves."""
    kinds = set(FLOW_KINDS.values())
    return sorted([*(name for name, model in FLOW_KINDS.items() if model not in FLOW_STEPS),
                   *(f"{model.__name__} (steps of no kind)" for model in FLOW_STEPS if model not in kinds)])


if unmatched():
    raise TypeError(f"flow kinds without steps: {', '.join(unmatched())}")


def flow_steps(env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream,
               scheduled: float | None = None, late: bool = False,
               in_flight: dict[str, Flow] | None = None, lead: int = 0) -> Steps[FlowOutcome]:
    """One flow to its end, as steps (it yields each wait), journaling exactly one outcome for it.

    The flow starts here, when it is made: its start is journaled and it is in `in_flight`
    (the load plan's table) before its steps first run on a greenlet of their own. So a
    load that stops between the two still counts it in flight and gives it the grace
    period, and a run that stops with flows waiting on their leads journals their ends
    itself, in bulk (`interrupt`), instead of waiting for each flow to be stopped; a flow
    whose end is already journaled writes nothing more when it is stopped (its greenlet
    killed mid-round, or its parked steps closed).
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
    return _to_the_end(env, flow, spec, scheduled, in_flight)


def _to_the_end(env: FlowEnv, flow: Flow, spec: FlowSpec, scheduled: float | None,
                in_flight: dict[str, Flow] | None) -> Steps[FlowOutcome]:
    """A started flow's steps, then its one outcome journaled (unless the run journaled it first)."""
    outcome = FlowOutcome.INTERRUPTED
    try:
        outcome = yield from FLOW_STEPS[type(spec)](flow, spec, scheduled)
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
            in_flight.pop(flow.flow_id, None)
        if not flow.ended:
            finish(env, flow, outcome)
    return outcome


def run_flow(env: FlowEnv, spec: FlowSpec, flow_id: str, rng: RandomStream,
             scheduled: float | None = None, late: bool = False,
             in_flight: dict[str, Flow] | None = None, lead: int = 0) -> FlowOutcome:
    """Run one flow to its end in the calling greenlet, sleeping its waits (the closed model's agents)."""
    return drive(flow_steps(env, spec, flow_id, rng, scheduled, late, in_flight, lead), env.sleep)


