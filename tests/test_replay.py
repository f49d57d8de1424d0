"""A replayed honest retry: sealing cannot stop it, the shared once-only record must, the shop's 409 backs it.

The SDK accepts the same valid state again on any replica within its TTL, so these tests
send the same retry twice to two replicas and read the ledger: exactly one release.
"""

from __future__ import annotations

import httpx
import pytest

from harness.targets.local_deployment import ReplicaOptions
from tests.services import redis_server, require_binary
from tests.test_rejection_reasons import YES, first_round, post


def replay_twice(shop) -> tuple[dict, dict, dict]:
    arguments, state = first_round(shop, 0)
    honest = post(shop.replica_urls[0], "issue_refund", arguments, id=3, responses=YES, state=state).json()["result"]
    replay = post(shop.replica_urls[1], "issue_refund", arguments, id=4, responses=YES, state=state).json()["result"]
    refund_id = honest["structuredContent"]["refund_id"]
    row = next(r for r in httpx.get(shop.api.base_url + "/ledger").json()["refunds"] if r["refund_id"] == refund_id)
    return honest, replay, row


def test_a_replay_on_another_replica_is_refused_by_the_shared_sqlite_record(deploy):
    honest, replay, row = replay_twice(deploy(replicas=2))
    assert honest["structuredContent"]["status"] == "requested"
    assert replay["isError"] and "already confirmed" in replay["content"][0]["text"]
    assert row["released"] == 1 and row["release_conflicts"] == 0


@pytest.mark.services
def test_a_replay_on_another_replica_is_refused_by_the_shared_redis_record(deploy):
    require_binary("redis-server")
    with redis_server() as url:
        honest, replay, row = replay_twice(deploy(replicas=2, store=url))
    assert replay["isError"] and "already confirmed" in replay["content"][0]["text"]
    assert row["released"] == 1 and row["release_conflicts"] == 0


def test_with_once_only_records_in_memory_the_shops_409_stops_the_second_release(deploy):
    shop = deploy([ReplicaOptions(answers_store="memory"), ReplicaOptions(answers_store="memory")])
    honest, replay, row = replay_twice(shop)
    assert honest["structuredContent"]["status"] == "requested"
    assert replay["isError"] and "did not release it again" in replay["content"][0]["text"]
    assert row["released"] == 1 and row["release_conflicts"] == 1


def test_with_quotes_in_memory_a_retry_on_another_replica_finds_no_quote(deploy):
    shop = deploy([ReplicaOptions(store="memory"), ReplicaOptions(store="memory")])
    arguments, state = first_round(shop, 0)
    retry = post(shop.replica_urls[1], "issue_refund", arguments, id=3, responses=YES, state=state).json()["result"]
    assert retry["isError"] and "There is no quote" in retry["content"][0]["text"]
