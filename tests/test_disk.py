"""The journal's disk estimate (`harness.config.disk`), and the warning `validate` and `run` give when it cannot fit.

Free space is never faked: the scenario that cannot fit asks 1,000,000 flows/s for 30 days,
petabytes, more than any disk this suite runs on has free.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.disk import (
    CALL_ROUNDS,
    FLOW_BYTES,
    JOURNAL_COMPRESSION,
    PLAIN_TAIL_BYTES,
    ROUND_BYTES,
    journal_need,
    size_text,
)
from harness.config.scenario import parse_scenario
from harness.journal.segments import SEGMENT_BYTES
from harness.mrtr.client import DEFAULT_INPUT_REQUIRED_MAX_ROUNDS
from tests.harness_run import ROOT, SCENARIOS, run_harness

SMOKE = SCENARIOS / "smoke.toml"

HEAD = 'name = "disk"\nseed = 1\nduration = "{duration}"\n[target]\nkind = "embedded"\n'


def _scenario(duration: str, load: str, flows: str = '[[flows]]\nkind = "refund"\namount = "below-limit"\n'):
    return parse_scenario(HEAD.format(duration=duration) + "[load]\n" + load + flows)


def _too_big(folder: Path, external: bool = False) -> Path:
    """The smoke scenario at 1,000,000 flows/s for 30 days (with `external`: behind a URL nothing answers)."""
    text = SMOKE.read_text().replace('duration = "30s"', 'duration = "720h"')
    text = text.replace("arrival_rate = 4 ", "arrival_rate = 1000000 ")
    if external:
        text = text.replace('kind = "embedded"', 'kind = "external"\nurls = ["http://127.0.0.1:9/mcp"]')
    path = folder / "too-big.toml"
    path.write_text(text)
    return path


def test_the_estimate_is_flows_times_the_bytes_of_a_flow_of_its_rounds():
    """Rate x duration flows, each its start and outcome lines and its rounds' lines; compression divides."""
    need = journal_need(_scenario("2h", "arrival_rate = 50\n"))
    assert need is not None
    assert need.flows == pytest.approx(50 * 7200)
    assert need.rounds_per_flow == 2  # quote_refund, then issue_refund released at once
    plain = 50 * 7200 * (FLOW_BYTES + 2 * ROUND_BYTES)
    assert need.bytes == pytest.approx(plain / JOURNAL_COMPRESSION + PLAIN_TAIL_BYTES)
    assert journal_need(_scenario("2h", "arrival_rate = 50\n"), compression=1).bytes == pytest.approx(
        plain + PLAIN_TAIL_BYTES)
    small = journal_need(_scenario("10s", "arrival_rate = 1\n"))  # all of it in the plain open segment
    assert small is not None and small.bytes == pytest.approx(10 * (FLOW_BYTES + 2 * ROUND_BYTES) * (
        1 + 1 / JOURNAL_COMPRESSION))


def test_the_plain_tail_is_two_of_the_journals_segments():
    assert PLAIN_TAIL_BYTES == 2 * SEGMENT_BYTES


def test_rounds_per_flow_is_the_weighted_mean_of_each_kind_s_bound():
    mixed = '[[flows]]\nkind = "refund"\nweight = 3\n[[flows]]\nkind = "return"\nweight = 1\n'
    assert journal_need(_scenario("1m", "arrival_rate = 1\n", mixed)).rounds_per_flow == pytest.approx((3 * 3 + 2) / 4)
    endless = parse_scenario(HEAD.format(duration="1m") + 'payment_rounds = 0\n[load]\narrival_rate = 1\n'
                             '[[flows]]\nkind = "payout"\n')
    assert journal_need(endless).rounds_per_flow == 1 + 1 + CALL_ROUNDS  # pay_refund asks until the client's cap
    call = _scenario("1m", "arrival_rate = 1\nretry_lost_answers = 2\n", '[[flows]]\nkind = "call"\ntool = "t"\n')
    assert journal_need(call).rounds_per_flow == CALL_ROUNDS  # resends count within the cap
    assert CALL_ROUNDS == DEFAULT_INPUT_REQUIRED_MAX_ROUNDS + 1


def test_a_ramp_and_stages_are_integrated_and_a_closed_model_is_not_estimated():
    ramp = journal_need(_scenario("20s", 'arrival_rate = 10\nramp = "10s"\n'))
    assert ramp.flows == pytest.approx(1 + (10 ** 2 - 1) / 2 + 10 * 10)  # from a tenth of the rate, then full
    stages = journal_need(_scenario("30s", 'stages = [{duration = "10s", target = 10}, {duration = "10s", '
                                           'shape = "hold"}]\n'))
    assert stages.flows == pytest.approx(10 * 10 / 2 + 10 * 20)  # up to 10/s, then 10/s to the end
    assert journal_need(_scenario("720h", 'model = "closed"\nusers = 1000000\n')) is None


def test_validate_warns_when_the_journal_cannot_fit_and_not_for_the_smoke_scenario(tmp_path):
    """A warning (exit 0) saying how much, how much is free, where, and what to do; the folder not made yet is
    asked on its nearest existing parent."""
    too_big = _too_big(tmp_path)
    result = subprocess.run([sys.executable, "-m", "harness", "validate", str(too_big), str(SMOKE), "--results",
                             str(tmp_path / "not" / "yet")], capture_output=True, text=True, cwd=ROOT, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": ok (") == 2
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"{too_big}: warning: the journal may need up to "), warnings
    assert " TB on disk (" in warnings[0] and "up to 1,000,000 flows/s for 720h" in warnings[0]
    assert f"the filesystem of {tmp_path} has " in warnings[0] and " free: shorten the duration" in warnings[0]
    assert "lower the rate, or give --results a folder on a disk with more room" in warnings[0]


def test_run_warns_at_its_start_about_its_own_results_folder(tmp_path):
    """`run` checks again where its results really go (the target here is unreachable: the run ends at once)."""
    finished = run_harness(_too_big(tmp_path, external=True), tmp_path / "results")
    assert finished.code == 3, finished.output
    assert "warning: the journal may need up to " in finished.output
    assert f"the filesystem of {finished.folder} has " in finished.output


def test_sizes_read_in_decimal_units():
    assert [size_text(n) for n in (999, 1000, 12_345_678, 4.1e12, 3.85e15, 2.6e18)] == \
        ["999 B", "1 kB", "12.3 MB", "4.1 TB", "3.85 PB", "2,600 PB"]
