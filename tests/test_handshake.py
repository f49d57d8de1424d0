"""The cluster handshake's pieces that read what any node sends: proofs, nonces and sealed messages.

Whatever arrives (any msgpack value a stranger can send), reading it never raises anything but `Unsealed`, and
nothing is taken that the session's other side did not seal, once, as that kind.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.load.distributed import JOURNAL, Strangers
from harness.load.handshake import Session, Unsealed, is_nonce, new_nonce, proof, proven

SECRET = "the-secret-of-this-deployment"
WIRE = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
                    | st.binary(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=4),
                    max_leaves=16)
"""What msgpack can carry: what a stranger's message data can be."""


def _pair() -> tuple[Session, Session]:
    worker_nonce, master_nonce = new_nonce(), new_nonce()
    return (Session(SECRET, "node-1", worker_nonce, master_nonce),
            Session(SECRET, "node-1", worker_nonce, master_nonce))


def test_a_sealed_message_opens_once_as_its_own_kind_on_the_other_side_only():
    worker, master = _pair()
    sealed = worker.seal(JOURNAL, {"lines": ["a", "b"], "end": 10})
    assert master.open(JOURNAL, sealed) == {"lines": ["a", "b"], "end": 10}
    with pytest.raises(Unsealed):
        master.open(JOURNAL, sealed)  # again: a replay
    later = worker.seal(JOURNAL, {"lines": ["c"], "end": 12})
    with pytest.raises(Unsealed):
        master.open("mrtr:finished", later)  # as another kind
    stranger = Session("another secret", "node-1", new_nonce(), new_nonce())
    with pytest.raises(Unsealed):
        master.open(JOURNAL, stranger.seal(JOURNAL, {"lines": ["forged"], "end": 99}))
    tampered = {**later, "data": {"lines": ["forged"], "end": 12}}
    with pytest.raises(Unsealed):
        master.open(JOURNAL, tampered)
    assert master.open(JOURNAL, later) == {"lines": ["c"], "end": 12}


def test_a_proof_is_bound_to_its_role_node_and_nonces():
    w, m = new_nonce(), new_nonce()
    master = proof(SECRET, "master", "node-1", w, m)
    assert proven(master, proof(SECRET, "master", "node-1", w, m))
    for other in (proof(SECRET, "worker", "node-1", w, m), proof(SECRET, "master", "node-2", w, m),
                  proof(SECRET, "master", "node-1", m, w), proof("another", "master", "node-1", w, m)):
        assert not proven(master, other)
    assert is_nonce(w) and not is_nonce(w.upper()) and not is_nonce(w[:-1]) and not is_nonce(None)


@given(sealed=WIRE, kind=st.sampled_from([JOURNAL, "mrtr:finished", "mrtr:report"]))
def test_whatever_a_stranger_sends_is_refused_and_nothing_else_is_raised(sealed, kind):
    _, master = _pair()
    with pytest.raises(Unsealed):
        master.open(kind, sealed)


@given(kind=WIRE, data=WIRE, lines=st.lists(st.text(max_size=5), max_size=5))
def test_counting_a_strangers_message_never_raises(kind, data, lines):
    strangers = Strangers()
    for message in (SimpleNamespace(type=kind, data=data), SimpleNamespace(type=JOURNAL, data={"lines": lines}),
                    SimpleNamespace(type=JOURNAL, data={"data": {"lines": lines}}),
                    SimpleNamespace(type=JOURNAL, data=data)):
        strangers.drop(message)
    assert strangers.lines >= 2 * len(lines)
    assert strangers.messages >= 2 + (not isinstance(kind, str))
