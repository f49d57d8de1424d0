"""Every envelope mutant sent to a real shop replica (the SDK's streamable HTTP server): the answer each gets.

The classes the SDK answers as JSON-RPC 2.0 and MCP require must be judged `as_required`; the
ones it answers otherwise are exactly those `SDK_DEVIATIONS` names, with what it sends instead.
"""

from __future__ import annotations

import json

import pytest

from harness.config.mutations import EnvelopeMutation
from harness.load.envelope import SDK_DEVIATIONS, EnvelopeAnswer, exchange, judge, make_mutant
from harness.mrtr.transport import Transport
from harness.mrtr.wire import Envelope

LIMIT = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def shop(deploy):
    return deploy(replicas=1)


@pytest.mark.parametrize("mutation", list(EnvelopeMutation))
def test_the_sdk_server_answers_each_envelope_mutant_as_the_spec_requires_or_as_its_named_deviation(shop, mutation):
    envelope = Envelope({"elicitation": {"form": {}}}, ("envelope-test", "1"))
    mutant = make_mutant(mutation, json.loads(envelope.meta_json), 41, LIMIT, envelope.base_headers)
    transport = Transport(read_timeout=30)
    try:
        answers = exchange(transport, shop.replica_urls[0], mutant)
    finally:
        transport.close()
    assert len(answers) == mutant.copies and all(got is not None for got in answers)
    verdicts = {judge(mutation, got, mutant.sent_id) for got in answers}
    if mutation in SDK_DEVIATIONS:
        assert verdicts == {EnvelopeAnswer.OTHERWISE}
        assert SDK_DEVIATIONS[mutation].startswith(answers[0].describe() + ":")
    else:
        assert verdicts == {EnvelopeAnswer.AS_REQUIRED}, [got.describe() for got in answers if got is not None]
