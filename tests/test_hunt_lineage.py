"""The lineage of a passing trial (harness.hunt.lineage): each completed flow's hand-overs of state, read from a journal
written by the harness's own Journal writer; and no journal content makes the reader raise."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config.chaos import CHAOS_ACTIONS, EDGE_KINDS
from harness.hunt.lineage import Edge, Shape, supports, trial_supports
from harness.journal.writer import Journal

T0 = 1_760_000_000.0


def put(journal: Journal, record_type: str, **fields: object) -> None:
    """A record as any writer journals it (the typed records are plain dicts on the wire)."""
    journal.write({"type": record_type, **fields})  # type: ignore[arg-type]


def round_of(journal: Journal, flow_id: str, number: int, replica: str, at: float, outcome: str, *,
             tool: str = "issue_refund", **more: object) -> None:
    put(journal, "round", t=T0 + at + 0.05, flow_id=flow_id, flow="refund", tool=tool, round=number, replica=replica,
        intended=T0 + at, sent=T0 + at, latency=0.05, server_time=0.04, outcome=outcome, http_status=200,
        code=None, **more)


def write_trial(folder: Path) -> Path:
    """A trial's journal: a refund that crossed replicas (r1 minted, r2 verified), one whose second round's answer
    was lost and resent after a re-dispatch, a return of one round, and a refund that was rejected."""
    folder.mkdir(parents=True, exist_ok=True)
    with Journal(folder / "journal.jsonl") as journal:
        put(journal, "run", t=T0 - 2, event="start", run_id="t", scenario="s", seed=1, duration=10.0)
        put(journal, "run", t=T0, event="load-started")
        round_of(journal, "f1", 1, "r1", 1.0, "input_required")
        round_of(journal, "f1", 2, "r2", 3.0, "complete", crossed=True)
        put(journal, "flow", t=T0 + 3.1, flow_id="f1", flow="refund", outcome="completed", rounds=2)
        round_of(journal, "f2", 1, "r2", 4.0, "input_required")
        round_of(journal, "f2", 2, "r2", 5.0, "answer_lost", crossed=False)
        round_of(journal, "f2", 3, "r2", 5.5, "complete", crossed=False, redispatched_from="r1")
        put(journal, "flow", t=T0 + 5.6, flow_id="f2", flow="refund", outcome="completed", rounds=3)
        round_of(journal, "f3", 1, "r1", 6.0, "complete", tool="start_return")
        put(journal, "flow", t=T0 + 6.1, flow_id="f3", flow="return", outcome="completed", rounds=1)
        round_of(journal, "f4", 1, "r1", 7.0, "input_required")
        round_of(journal, "f4", 2, "r2", 8.0, "invalid_state", crossed=True)
        put(journal, "flow", t=T0 + 8.1, flow_id="f4", flow="refund", outcome="rejected", rounds=2)
    return folder


def test_each_completed_flow_has_its_hand_overs_with_who_minted_verified_and_when(tmp_path: Path) -> None:
    found = {support.flow_id: support for support in trial_supports(write_trial(tmp_path / "trial"))}
    assert set(found) == {"f1", "f2", "f3"}, "a rejected flow is no support: its outcome was not kept alive"
    (crossing,) = found["f1"].edges
    assert crossing == Edge("issue_refund", 2, "r1", "r2", 1.05, 3.0)
    assert crossing.crossed and abs(crossing.age - 1.95) < 1e-9
    lost, resent = found["f2"].edges
    assert (lost.minter, lost.verifier, lost.resent, lost.crossed) == ("r2", "r2", None, False)
    assert (resent.minter, resent.verifier, resent.resent, resent.redispatched_from) == ("r2", "r2", "answer-lost",
                                                                                           "r1")
    assert resent.round == 3 and abs(resent.age - 1.45) < 1e-9, "a resent round verifies the same state again"
    assert found["f3"].edges == () and found["f3"].flow == "return"
    assert found["f2"].shapes() == {Shape("r2", "r2"), Shape("r2", "r2", "r1", "answer-lost")}


def test_a_missing_or_binary_journal_has_no_supports(tmp_path: Path) -> None:
    assert trial_supports(tmp_path) == []
    (tmp_path / "journal.jsonl").write_bytes(b"\0\1\2 not a journal\n")
    assert trial_supports(tmp_path) == []


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                  max_size=4), max_leaves=12)
_ROUNDISH = st.fixed_dictionaries({
    "type": st.sampled_from(["round", "flow", "run", "chaos"]) | st.text(max_size=4),
    "flow_id": st.sampled_from(["f1", "f2"]) | _JSON, "tool": st.sampled_from(["a", "b"]) | _JSON,
    "round": st.integers(-2, 4) | _JSON, "replica": st.sampled_from(["r1", "r2"]) | _JSON,
    "t": st.floats(allow_nan=True) | _JSON, "sent": st.floats() | _JSON, "event": st.just("load-started") | _JSON,
    "outcome": st.sampled_from(["input_required", "complete", "completed", "answer_lost"]) | _JSON,
    "flow": st.sampled_from(["refund"]) | _JSON, "redispatched_from": _JSON})


@settings(max_examples=300, deadline=None)
@given(st.lists(_ROUNDISH | _JSON, max_size=20))
def test_no_journal_content_makes_the_reader_raise(records: list[object]) -> None:
    for support in supports(records):
        assert all(edge.age >= 0 for edge in support.edges)


@settings(max_examples=100, deadline=None)
@given(st.lists(_ROUNDISH, max_size=12), st.binary(max_size=64))
def test_no_journal_file_makes_the_reader_raise(records: list[dict[str, object]],
                                               junk: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        text = "".join(json.dumps(record, default=str) + "\n" for record in records).encode() + junk
        (folder / "journal.jsonl").write_bytes(text)
        trial_supports(folder)


def test_every_chaos_action_declares_the_edges_it_can_cut_by_known_kinds() -> None:
    for name, model in CHAOS_ACTIONS.items():
        assert model.cuts, f"{name} declares no edge it can cut: lineage-driven search could never pick it"
        unknown = set(model.cuts) - set(EDGE_KINDS)
        assert not unknown, f"{name} cuts edge kinds no edge has: {sorted(unknown)} (they are: {sorted(EDGE_KINDS)})"
    assert CHAOS_ACTIONS["network"].cuts == {"answer"} and CHAOS_ACTIONS["rotate-keys"].cuts == {"key"}
    assert "age" in CHAOS_ACTIONS["set-ttl"].cuts and CHAOS_ACTIONS["revoke"].cuts == {"token"}
