"""Key rotation across replicas at different phases, done by rewriting ring files under running replicas.

Mint on a replica holding the row's ring, open on one holding the column's ring. Adjacent
phases must coexist; skipping one gives `unknown key`. Every ring change here is a file
rewritten under a running replica, so the matrix also proves rotation needs no restart.
"""

from __future__ import annotations

import httpx
import pytest

from harness.mrtr.keys import fingerprint, new_key, write_ring
from harness.targets.local_deployment import ReplicaOptions
from tests.test_rejection_reasons import YES, first_round, logged, post

OLD, NEW = new_key(), new_key()
PHASES = {"[old]": [OLD], "[old,new]": [OLD, NEW], "[new,old]": [NEW, OLD], "[new]": [NEW]}
MINTER, OPENER = 0, 1

# The rotation table: mint on the row, open on the column.
EXPECTED = {
    "[old]": {"[old]": "ok", "[old,new]": "ok", "[new,old]": "ok", "[new]": "unknown key"},
    "[old,new]": {"[old]": "ok", "[old,new]": "ok", "[new,old]": "ok", "[new]": "unknown key"},
    "[new,old]": {"[old]": "unknown key", "[old,new]": "ok", "[new,old]": "ok", "[new]": "ok"},
    "[new]": {"[old]": "unknown key", "[old,new]": "ok", "[new,old]": "ok", "[new]": "ok"},
}


@pytest.fixture(scope="module")
def rings(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rings")
    paths = folder / "minter", folder / "opener"
    for path in paths:
        write_ring(path, [OLD])
    return paths


@pytest.fixture(scope="module")
def shop(deploy, rings):
    return deploy([ReplicaOptions(keyring=f"file:{rings[0]}"), ReplicaOptions(keyring=f"file:{rings[1]}")])


def serving_keys(shop, replica: int) -> list[str]:
    return httpx.get(shop.replicas[replica].base_url + "/healthz").json()["keys"]


@pytest.mark.parametrize("opener_phase", list(PHASES))
@pytest.mark.parametrize("minter_phase", list(PHASES))
def test_rotation_matrix(shop, rings, minter_phase, opener_phase):
    write_ring(rings[0], PHASES[minter_phase])
    write_ring(rings[1], PHASES[opener_phase])
    arguments, state = first_round(shop, MINTER)
    lines = len(logged(shop, OPENER))
    response = post(shop.replica_urls[OPENER], "issue_refund", arguments, id=3, responses=YES, state=state)
    outcome = "ok" if response.status_code == 200 else logged(shop, OPENER)[lines:][0]
    assert outcome == EXPECTED[minter_phase][opener_phase]
    assert serving_keys(shop, MINTER) == [fingerprint(key) for key in PHASES[minter_phase]]


def test_a_broken_ring_file_keeps_the_ring_in_force(shop, rings):
    write_ring(rings[0], [OLD])
    first_round(shop, MINTER)  # the replica has loaded [old]
    rings[0].write_text("too-short\n")
    first_round(shop, MINTER)
    assert serving_keys(shop, MINTER) == [fingerprint(OLD)]
    assert "key ring not reloaded" in shop.replicas[MINTER].log_path.read_text()
    assert OLD not in shop.replicas[MINTER].log_path.read_text(), "a key must never reach a log"
    write_ring(rings[0], [OLD])
