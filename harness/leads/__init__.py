"""Simulated leads: the people who answer a server's questions between MRTR rounds.

Pure and deterministic: think-time distributions (`think`), answers built from a form's
schema (`answers`), the per-round decision (`lead`) and per-flow random streams
(`seeding`). The caller sleeps and sends; nothing here touches time or the network.
"""

from harness.leads.answers import UnanswerableRequest, UnanswerableSchema, answer_form
from harness.leads.lead import Action, Lead, LeadProfile, LeadResponse, capabilities
from harness.leads.seeding import FlowStream, RandomStream, derive_seed, flow_stream, stream
from harness.leads.think import (
    ConstantThink,
    ExponentialThink,
    LognormalThink,
    ThinkTime,
    TimeScale,
    UniformThink,
    parse_think_time,
    to_modelled,
    to_real,
)

__all__ = [
    "Action",
    "ConstantThink",
    "ExponentialThink",
    "FlowStream",
    "Lead",
    "LeadProfile",
    "LeadResponse",
    "LognormalThink",
    "RandomStream",
    "ThinkTime",
    "TimeScale",
    "UnanswerableRequest",
    "UnanswerableSchema",
    "UniformThink",
    "answer_form",
    "capabilities",
    "derive_seed",
    "flow_stream",
    "parse_think_time",
    "stream",
    "to_modelled",
    "to_real",
]
