"""Reconciliation by matching: each client -32602 paired with one logged line, not totals compared."""

from __future__ import annotations

from harness.folding.figures import RunFigures
from harness.folding.reconcile import Matching, TracedReason, UnaskedMatching
from harness.report import render_thresholds
from harness.report.verdict import RunChecks, decide

T0 = 1_780_000_000.0


def rejected_round(t: float, replica: str, flow: str = "w0-000001") -> dict:
    return {"type": "round", "t": t, "flow_id": flow, "round": 2, "replica": replica, "latency": 0.02,
            "outcome": "invalid_state"}


def logged(t: float, replica: str, reason: str = "unknown key") -> dict:
    return {"type": "rejection", "t": t, "replica": replica, "reason": reason, "method": "tools/call"}


def reconcile(records: list[dict], replicas: tuple[str, ...] = ("r1", "r2")) -> dict:
    return dict(Matching.from_records(records).reconcile(replicas))


def test_each_client_rejection_matches_the_line_its_replica_logged() -> None:
    result = reconcile([rejected_round(T0 + 1, "r1"), logged(T0 + 0.99, "r1"),
                        rejected_round(T0 + 5, "r2"), logged(T0 + 4.99, "r2", "expired")])
    assert (result["matched"], result["unexplained"], result["unmatched_logged"]) == (2, 0, 0)


def test_equal_totals_do_not_hide_rejections_nobody_logged() -> None:
    """Three -32602 with no line of their own, three lines from an hour ago: totals agree, nothing matches."""
    records = [rejected_round(T0 + n, "r1", f"w0-00000{n}") for n in range(3)]
    records += [logged(T0 - 3600 + n, "r1") for n in range(3)]
    result = reconcile(records)
    assert (result["client_rejections"], result["logged"]) == (3, 3)
    assert (result["matched"], result["unexplained"], result["unmatched_logged"]) == (0, 3, 3)
    assert "w0-000000 round 2 on r1" in result["examples"]["unexplained"][0]
    assert result["examples"]["unmatched_logged"][0].startswith("unknown key on r1 at ")


def test_a_line_on_another_replica_does_not_explain_a_rejection_on_this_one_when_its_own_line_is_there() -> None:
    """r1's line explains r1's rejection; r2's line, at the same moment, is left for nobody."""
    result = reconcile([rejected_round(T0, "r1"), logged(T0, "r2"), logged(T0, "r1")])
    assert (result["matched"], result["unexplained"], result["unmatched_logged"]) == (1, 0, 1)
    assert result["examples"]["unmatched_logged"][0].startswith("unknown key on r2")


def test_behind_a_balancer_rejections_match_by_time_alone() -> None:
    records = [rejected_round(T0 + 1, "balancer"), rejected_round(T0 + 9, "balancer"),
               logged(T0 + 1, "shop-0"), logged(T0 + 30, "shop-1")]
    result = reconcile(records, ("balancer",))
    assert (result["matched"], result["unexplained"], result["unmatched_logged"]) == (1, 1, 1)


def test_many_rejections_close_together_each_take_their_own_line() -> None:
    records = [rejected_round(T0 + n * 0.01, "r1", f"f{n}") for n in range(2000)]
    records += [logged(T0 + n * 0.01, "r1") for n in range(1999)]
    result = reconcile(records)
    assert (result["matched"], result["unexplained"], result["unmatched_logged"]) == (1999, 1, 0)


def _steady(rejections: int, lag: float) -> list[dict]:
    """`rejections` -32602s on three replicas, 50 in 5 s of every 10 s, each line logged 10 ms before its round
    ended and journaled `lag` seconds later; every seventh rejection has no line, and in each quiet 5 s a replica
    logs one line no client of this run explains (another client's). In the order the journal holds them."""
    timed = []
    for n in range(rejections):
        burst = T0 + (n // 50) * 10
        t, replica = burst + (n % 50) * 0.1, f"r{n % 3}"
        timed.append((t, rejected_round(t, replica, f"w0-{n:06d}")))
        if n % 7:
            timed.append((t - 0.01 + lag, logged(t - 0.01, replica)))
        if n % 50 == 0:
            timed.append((burst + 8.2 + lag, logged(burst + 8.2, replica, "expired")))
    return [record for _, record in sorted(timed, key=lambda pair: pair[0])]


def _fold(records: list[dict], held: int) -> tuple[Matching, int]:
    """The matching of `records` with at most `held` of each side, and the most it ever held."""
    matching, most = Matching(held=held), 0
    for record in records:
        matching.add(record)
        most = max(most, len(matching.clients), len(matching.logged))
    return matching, most


def _counts(matching: Matching) -> dict:
    result = dict(matching.reconcile(("r0", "r1", "r2")))
    del result["t"]
    return result


def test_a_steady_stream_far_beyond_the_bound_holds_the_bound_and_counts_as_matching_everything_at_once() -> None:
    """20,000 rejections, 300 a minute, through a matching that holds 1,000 of each side: it settles what is a
    minute old as it goes, and its counts (and examples) are those of one matching of the whole run at its end."""
    records = _steady(20_000, lag=2.0)
    bounded, most = _fold(records, held=1_000)
    unbounded, everything = _fold(records, held=len(records))
    assert most == 1_000  # reached the bound, never held more: each add over it settles at once
    assert everything == 20_000 and bounded.settled.clients > 15_000  # all held at once; settled again and again
    expected = _counts(unbounded)
    assert (expected["unexplained"], expected["unmatched_logged"]) == (2858, 400)
    assert _counts(bounded) == {**expected, "settled_early": 0}


def test_past_the_bound_unmatched_items_count_against_the_run_never_for_it() -> None:
    """A burst of rejections larger than the bound whose lines the collector journals only after all of them: a
    matching of everything explains each one; the bounded one cannot hold them, counts the oldest unexplained and
    says so, so the run fails rather than passes on what it could not check."""
    records = [rejected_round(T0 + n * 0.01, "r1", f"f{n}") for n in range(300)]
    records += [logged(T0 + n * 0.01, "r1") for n in range(300)]
    bounded, most = _fold(records, held=100)
    unbounded, _ = _fold(records, held=len(records))
    assert (_counts(unbounded)["unexplained"], _counts(unbounded)["matched"]) == (0, 300)
    result = _counts(bounded)
    assert most == 100 and result["unexplained"] > 0 and result["settled_early"] >= result["unexplained"]
    assert result["matched"] + result["unexplained"] == result["client_rejections"] == 300
    checks = RunChecks()
    checks.add({**bounded.reconcile(("r1",)), "type": "reconciliation"})
    assert checks.reconciliation is not None and not checks.reconciliation.passed
    assert checks.reconciliation.as_dict()["settled_early"] == result["settled_early"]
    verdict = decide(RunFigures(), [], checks)
    assert f"{result['settled_early']} unmatched rejection(s) and line(s) were counted before" in \
        render_thresholds(verdict)


def test_a_matched_rejection_whose_round_was_traced_keeps_its_span_ids_for_its_reasons_span() -> None:
    """Reconciliation hands the run each traced rejected round with the reason logged for it (its `mrtr.reconciled`
    span's parts); an untraced round, or ids that are not hex of the right length (the journal is input), give none."""
    matching = Matching()
    traced = {"trace_id": "ab" * 16, "span_id": "cd" * 8}
    for index, ids in enumerate([traced, {}, {"trace_id": "not hex", "span_id": "cd" * 8}]):
        matching.add({"type": "round", "t": 100.0 + index, "latency": 0.1, "outcome": "invalid_state",
                      "replica": "r1", "flow_id": f"f{index}", "round": 2, **ids})
        matching.add({"type": "rejection", "t": 100.0 + index, "replica": "r1", "reason": "unknown key"})
    assert matching.traced_reasons(["r1"]) == [TracedReason("ab" * 16, "cd" * 8, "unknown key", "r1", 100.0)]


def test_a_rejection_on_a_replica_whose_log_gave_no_line_is_unexplained_for_want_of_an_adapter() -> None:
    """r2's log has no line the run's adapter reads (another server's format): its rejection is "no adapter for this
    server"; r1's, whose line the log lost while it read others, is plainly unexplained. Both fail the run alike."""
    result = reconcile([rejected_round(T0, "r1", "w0-000001"), logged(T0, "r1"), rejected_round(T0 + 9, "r1", "w0-02"),
                        rejected_round(T0 + 1, "r2", "w0-000003")])
    assert (result["unexplained"], result["no_adapter"]) == (2, 1)
    assert reconcile([rejected_round(T0, "r1")])["no_adapter"] == 1
    assert reconcile([rejected_round(T0, "lb"), logged(T0 - 60, "r1")], replicas=("r1", "r2"))["no_adapter"] == 0


def test_a_32021_is_matched_to_the_line_its_replica_logged_for_it_and_never_to_a_32602_line() -> None:
    """-32021 (the client cannot answer input requests) has a matching of its own: its rounds against the `unasked`
    lines, apart from -32602's rejections; it is shown in the reconciliation, never part of its verdict."""
    unasked_round = {**rejected_round(T0 + 1, "r1", "w0-07"), "outcome": "missing_capability"}
    unasked_line = {"type": "unasked", "t": T0 + 0.99, "replica": "r1", "method": "tools/call", "capability": "url"}
    records = [unasked_round, unasked_line, {**unasked_round, "t": T0 + 20, "flow_id": "w0-08"},
               rejected_round(T0 + 30, "r2"), logged(T0 + 29.99, "r2")]
    assert UnaskedMatching.from_records(records).counts(("r1", "r2")) == {
        "client": 2, "logged": 1, "matched": 1, "unexplained": 1, "not_judged": 0,
        "examples": [f"w0-08 round 2 on r1 at {unasked_example_clock(T0 + 20)}"]}
    plain = reconcile(records)  # -32602's own matching takes none of them
    assert (plain["client_rejections"], plain["logged"], plain["matched"]) == (1, 1, 1)
    assert UnaskedMatching.from_records([rejected_round(T0, "r1"), logged(T0, "r1")]).counts(("r1",)) is None

    checks = RunChecks()
    checks.add({"type": "reconciliation", "t": T0 + 40, "client_rejections": 1, "logged": 1, "matched": 1,
                "unexplained": 0, "unmatched_logged": 0, "examples": {},
                "unasked": UnaskedMatching.from_records(records).counts(("r1", "r2"))})
    assert checks.reconciliation is not None and checks.reconciliation.passed
    shown = render_thresholds(decide(RunFigures(), [], checks))
    assert "-32021 (the client cannot answer input requests): 1 of 2 explained by a replica's line, 1 logged" in shown


def unasked_example_clock(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"
