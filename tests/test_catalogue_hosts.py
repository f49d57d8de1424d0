"""The on-call catalogue's causes in the hosts: one that cannot ask, 2025-era clients, endless URL rounds
(the run itself and each host's sign: `tests.test_catalogue.check_on_call`)."""

from __future__ import annotations

import pytest

from tests.test_catalogue import HOSTS, check_on_call


@pytest.mark.parametrize("name", HOSTS)
def test_each_host_scenario_produces_its_sign(name, tmp_path, monkeypatch):
    check_on_call(name, tmp_path, monkeypatch)
