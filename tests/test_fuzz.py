"""The requestState fuzzer: every mutant the shop is sent is refused, and a server that accepts them is caught.

Real runs (`mrtr-harness run`, a subprocess) against the embedded shop on each store and
against `tests.servers.open_door`, which completes whatever state it is sent back; the
mutation classes themselves are pinned in-process.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from harness.config.mutations import DEFAULT_MUTATIONS, Mutation
from harness.config.scenario import parse_scenario
from harness.config.strict import ScenarioError
from harness.folding.invariants import check_invariants
from harness.load.mutations import (
    EXPECTED_REASONS,
    TOKEN_MUTATIONS,
    Mutant,
    MutantAnswer,
    StatePool,
    answer_of,
    mutate_token,
)
from harness.mrtr.wire import JSON_NULL, CallFrame, Envelope
from tests.harness_run import run_harness
from tests.servers import start_server
from tests.services import require_binary

TOKEN = re.compile(rb"v1\.[A-Za-z0-9_-]{40,}")
"""Anything that looks like an SDK requestState (or a mutant made from one)."""

SHOP = """
name = "fuzz-{store}"
seed = 13
duration = "15s"
time_scale = 60
grace = "5s"

[target]
kind = "embedded"
replicas = 2
store = "{store}"
principal_header = "X-Lead"

[load]
arrival_rate = 7
routing = "other-replica"

[[flows]]
kind = "fuzz"

[leads]
think = {{ dist = "constant", value = "10s" }}

[expect]
unexplained_rejections = "== 0"
"""

OPEN_DOOR = """
name = "open-door"
seed = 21
duration = "6s"
time_scale = 60
grace = "5s"

[target]
kind = "external"
urls = ["{url}"]

[load]
arrival_rate = 8

[[flows]]
kind = "fuzz"
tool = "open"
arguments = [{{ door = "front" }}, {{ door = "back" }}]
swap_tool = "other"

[leads]
think = {{ dist = "constant", value = "6s" }}
"""

SENT_TO_THE_SHOP = list(DEFAULT_MUTATIONS)
"""Every class but expired (a whole TTL): the shop's replicas bind states to the principal header too."""


# --- in-process: the classes ------------------------------------------------------------------------


def _sealed_token(rng: random.Random) -> str:
    """A token in the SDK's format (`v1.` + base64url of key id, nonce, ciphertext, tag), made here."""
    import base64

    return "v1." + base64.urlsafe_b64encode(rng.randbytes(4 + 12 + 180 + 16)).decode().rstrip("=")


@pytest.mark.parametrize("mutation", sorted(TOKEN_MUTATIONS))
def test_the_same_seed_makes_the_same_mutant_and_every_mutant_differs_from_the_state(mutation):
    state = _sealed_token(random.Random(1))
    first = [mutate_token(mutation, state, random.Random(seed)) for seed in range(20)]
    again = [mutate_token(mutation, state, random.Random(seed)) for seed in range(20)]
    assert [(m.value, m.detail) for m in first] == [(m.value, m.detail) for m in again]
    assert all(mutant.value != state for mutant in first)
    if mutation in (Mutation.BIT_FLIP, Mutation.TRUNCATE, Mutation.EXTEND):
        assert len({str(mutant.value) for mutant in first}) > 10  # the seed picks the mutation, not just the class


def test_a_bit_flip_stays_in_the_sealed_part_and_oversize_is_a_mebibyte():
    state = _sealed_token(random.Random(2))
    for seed in range(50):
        flipped = mutate_token(Mutation.BIT_FLIP, state, random.Random(seed)).value
        assert isinstance(flipped, str) and flipped[:9] == state[:9]  # prefix and key id (4 bytes) untouched
        assert len(flipped) == len(state)
    assert mutate_token(Mutation.OVERSIZE, state, random.Random(0)).length >= (1 << 20) - 4


def test_an_explicit_null_is_sent_as_null_and_none_leaves_the_field_out():
    frame = CallFrame(Envelope({}, ("t", "1")), "open", {})
    assert b'"requestState":null' in frame.body(1, None, JSON_NULL)
    assert b"requestState" not in frame.body(1, None, None)


def test_the_pool_is_bounded_per_tool_and_offers_only_fresh_states_of_other_calls():
    pool = StatePool(size=3)
    rng = random.Random(0)
    for n in range(5):
        pool.add("issue_refund", f"state-{n}", {"quote_id": f"Q-{n}"})
    assert len(pool.by_tool["issue_refund"]) == 3
    assert pool.other_arguments("issue_refund", {"quote_id": "Q-4"}, rng, max_age=60) in {"state-2", "state-3"}
    assert pool.other_tool("issue_refund", rng, max_age=60) is None
    pool.add("record_return", "state-r", {"order_id": "O-1"})
    assert pool.other_tool("issue_refund", rng, max_age=60) == "state-r"
    assert pool.other_arguments("issue_refund", {"quote_id": "Q-4"}, rng, max_age=0.0) is None


def test_only_a_refusal_counts_as_rejected():
    bit_flip = Mutant(Mutation.BIT_FLIP, "v1.x", "bit 40")
    replay = Mutant(Mutation.REPLAY_COMPLETED, "v1.x", "again")
    null = Mutant(Mutation.NON_STRING, JSON_NULL, "null")
    assert answer_of(bit_flip, "invalid_state", 400, -32602) is MutantAnswer.REJECTED
    assert answer_of(bit_flip, "complete", 200, None) is MutantAnswer.ACCEPTED
    assert answer_of(bit_flip, "tool_error", 200, None) is MutantAnswer.ACCEPTED
    assert answer_of(bit_flip, "http_error", 502, None) is MutantAnswer.SERVER_ERROR
    assert answer_of(bit_flip, "jsonrpc_error", 200, -32603) is MutantAnswer.SERVER_ERROR
    assert answer_of(bit_flip, "timeout", None, None) is MutantAnswer.SERVER_ERROR
    assert answer_of(bit_flip, "connection_error", None, None) is MutantAnswer.OTHER
    assert answer_of(replay, "tool_error", 200, None) is MutantAnswer.REJECTED  # the once-only record refused it
    assert answer_of(replay, "complete", 200, None) is MutantAnswer.ACCEPTED
    assert answer_of(null, "input_required", 200, None) is MutantAnswer.REJECTED  # null is no state: asked afresh


def test_no_mutant_accepted_names_the_class_and_an_example():
    flows = [{"flow_id": "f1", "flow": "fuzz", "outcome": "rejected", "mutation": "bit-flip",
              "mutant_answer": "rejected", "mutant_detail": "bit 40 of 1696", "mutant_length": 287},
             {"flow_id": "f2", "flow": "fuzz", "outcome": "completed", "mutation": "swap-tool",
              "mutant_answer": "accepted", "mutant_detail": "another tool's state", "mutant_length": 287}]
    starts = [{"flow_id": "f1"}, {"flow_id": "f2"}]
    results = {result.name: result for result in check_invariants(None, starts, flows)}
    assert results["no_mutant_accepted"].violations == 1
    assert results["no_mutant_accepted"].examples[0].startswith("swap-tool: f2 accepted")
    results = {result.name: result for result in check_invariants(None, starts[:1], flows[:1])}
    assert results["no_mutant_accepted"].checked and results["no_mutant_accepted"].violations == 0


def test_a_fuzz_flow_that_can_send_nothing_is_refused_naming_why():
    base = "name='x'\nduration='5s'\n[load]\narrival_rate=1\n[[flows]]\nkind='fuzz'\n"
    with pytest.raises(ScenarioError, match=r"flows\[1\]\.mutations.*no principal.*principal_header"):
        parse_scenario(base + "mutations=['cross-principal']\n")
    bound = parse_scenario(base.replace("[load]", "[target]\nprincipal_header='X-Lead'\n[load]")
                           + "mutations=['cross-principal']\n")
    assert bound.flows[0].runnable(principal=True) == [Mutation.CROSS_PRINCIPAL]
    with pytest.raises(ScenarioError, match=r"target\.principal_header"):
        parse_scenario(base.replace("[load]", "[target]\nprincipal_header='X Lead'\n[load]"))
    with pytest.raises(ScenarioError, match=r"flows\[1\]\.mutations\[1\]"):
        parse_scenario(base + "mutations=['bit-twiddle']\n")
    with pytest.raises(ScenarioError, match="two or more `arguments`"):
        parse_scenario(base + "tool='t'\nmutations=['swap-arguments']\n")


# --- real runs ------------------------------------------------------------------------------------


def _tokens_in(folder: Path) -> list[str]:
    return [str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()
            and TOKEN.search(path.read_bytes())]


@pytest.mark.parametrize("store", ["sqlite", pytest.param("redis", marks=pytest.mark.services)])
def test_the_shop_on_every_store_rejects_every_class_with_its_reason(store, tmp_path):
    if store == "redis":
        require_binary("redis-server")
    scenario = tmp_path / "fuzz.toml"
    scenario.write_text(SHOP.format(store=store))
    finished = run_harness(scenario, tmp_path / "results", timeout=240)
    assert finished.code == 0, finished.output
    summary = finished.summary
    assert summary["invariants"]["no_mutant_accepted"] == {**summary["invariants"]["no_mutant_accepted"],
                                                           "checked": True, "violations": 0}
    by_mutation = summary["fuzz"]["by_mutation"]
    assert set(by_mutation) == {mutation.value for mutation in SENT_TO_THE_SHOP}
    for mutation in SENT_TO_THE_SHOP:
        row = by_mutation[mutation.value]
        assert row["sent"] > 0 and row["rejected"] == row["sent"], (mutation, row)
        logged = {reason: count for reason, count in row["reasons"].items() if reason != "unlogged"}
        assert (mutation is Mutation.REPLAY_COMPLETED) == (not logged), (mutation, row)
        if logged:
            assert max(logged, key=logged.__getitem__) in EXPECTED_REASONS[mutation], (mutation, row)
    # Reasons are paired with mutants by replica and time: two mutants answered by one replica in the
    # same millisecond can swap lines, so one stray reason is tolerated, never a class's usual one.
    rejected = sum(row["rejected"] for row in by_mutation.values())
    assert sum(row["unexpected_reasons"] for row in by_mutation.values()) <= max(1, rejected // 50), by_mutation
    assert summary["fuzz"]["skipped"] == {}
    assert _tokens_in(finished.folder) == []  # neither a state nor a mutant is kept, only class and length


@pytest.fixture(scope="module")
def open_door():
    running = start_server("tests.servers.open_door")
    try:
        yield running
    finally:
        running.stop()


def _mutants(journal: list[dict]) -> dict[str, tuple]:
    return {record["flow_id"]: (record["mutation"], record["mutant_detail"], record["mutant_length"])
            for record in journal if record.get("type") == "flow" and "mutation" in record}


def test_a_server_that_accepts_any_state_fails_the_run_naming_the_classes_and_the_same_seed_sends_the_same_mutants(
        open_door, tmp_path):
    scenario = tmp_path / "open-door.toml"
    scenario.write_text(OPEN_DOOR.format(url=open_door.url))
    first = run_harness(scenario, tmp_path / "first")
    assert first.code == 1, first.output
    summary = first.summary
    invariant = summary["invariants"]["no_mutant_accepted"]
    assert not invariant["passed"] and invariant["violations"] > 0
    assert any(problem.startswith("invariant no_mutant_accepted") for problem in summary["problems"])
    by_mutation = summary["fuzz"]["by_mutation"]
    accepted = {mutation for mutation, row in by_mutation.items() if row["accepted"]}
    assert accepted == set(by_mutation) and len(accepted) >= 8, by_mutation
    named = {example.split(":")[0] for example in invariant["detail"]}
    assert named <= accepted and named
    assert "FUZZ" in first.output and all(f"✗ {mutation}" in first.output for mutation in accepted)

    again = run_harness(scenario, tmp_path / "again")
    assert again.code == 1, again.output
    one, two = _mutants(first.journal()), _mutants(again.journal())
    both = one.keys() & two.keys()
    # How many flows start in 6 s depends on the machine's load; every flow both runs sent a mutant for
    # got the same one, and the flows numbered first are in both (the plan numbers them in order).
    assert len(both) >= min(len(one), len(two)) // 2 and both, (len(one), len(two))
    assert {flow_id: one[flow_id] for flow_id in both} == {flow_id: two[flow_id] for flow_id in both}
    assert _tokens_in(first.folder) == []
