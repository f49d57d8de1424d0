"""Reconciliation by matching: each client -32602 paired with one logged line, not totals compared."""

from __future__ import annotations

from harness.checks.reconcile import Matching

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
