"""`mrtr-harness history`: trends over many nights, gated, from results folders the harness's own writers made.

Each night is a journal written with the real `Journal` and typed records (tests/test_compare.py's
`write_run`: seeded lognormal latencies times a scale, starting at its night's time), then
summary.json, figures.json and the rest written by `rebuild_results`, as `mrtr-harness report`
writes them. No run is started: two histories of 14 nights are built once for the module (a
creep of 3% a night, and flat noise), and the refusals copy nights of the flat one. The
command runs as a user runs it (a subprocess), judged by its exit code, what it names and the
files it leaves.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path

import pytest
from scipy.stats import kendalltau, norm

from harness.compare.folders import compare_folders
from harness.compare.trend import MIN_NIGHTS, mann_kendall, sen_slope
from harness.exit_codes import TABLE
from harness.journal.records import EndStatus
from harness.report import rebuild_results
from tests.harness_run import ROOT
from tests.test_compare import SCENARIO, SLOW_REFUND_P95, T0, _run_step_script, _workflow, scenario, write_run

NIGHTS = 14
DAY = 86_400.0


def night_folder(root: Path, day: int) -> Path:
    return root / f"202612{day:02d}T020000Z-nightly"  # as the guide's history/*-nightly finds them


def write_nights(root: Path, scales: list[float], text: str = SCENARIO, first_day: int = 1) -> list[Path]:
    """One results folder per scale, a night apart from `first_day` on, each with its own noise (seed)."""
    run = scenario(text=text)
    folders = []
    for index, scale in enumerate(scales, start=first_day - 1):
        folder = write_run(night_folder(root, index + 1), run, flows=150, scale=scale, seed=index + 1,
                           t0=T0 + index * DAY)
        rebuild_results(folder)  # summary.json, figures.json, junit.xml, report.html, as `report` writes them
        folders.append(folder)
    return folders


@pytest.fixture(scope="module")
def creep(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """14 nights, each one's rounds 3% slower than the night before's."""
    return write_nights(tmp_path_factory.mktemp("creep"), [1.03 ** night for night in range(NIGHTS)])


@pytest.fixture(scope="module")
def flat(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """14 nights of noise with no trend: each night's rounds up to 8% faster or slower, at random."""
    jitter = random.Random(7)
    return write_nights(tmp_path_factory.mktemp("flat"), [jitter.uniform(0.92, 1.08) for _ in range(NIGHTS)])


def history(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "history", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def shuffled(folders: list[Path]) -> list[Path]:
    order = list(folders)
    random.Random(3).shuffle(order)
    return order


def by_metric(folder: Path) -> dict[str, dict]:
    return {row["metric"]: row for row in json.loads((folder / "history.json").read_text())["metrics"]}


def test_a_p95_creeping_3_percent_a_night_for_two_weeks_fails_though_every_nightly_compare_passes(creep):
    for before, after in zip(creep, creep[1:], strict=False):
        comparison = compare_folders(before, after)
        assert comparison.exit_code == 0, [result.metric for result in comparison.regressions]

    done = history(*shuffled(creep))  # the order given does not matter: the nights' start times do

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{SLOW_REFUND_P95}: worse by" in done.stdout
    document = json.loads((creep[-1] / "history.json").read_text())
    assert [night["run_id"] for night in document["nights"]] == [folder.name for folder in creep]
    p95 = by_metric(creep[-1])[SLOW_REFUND_P95]
    assert p95["verdict"] == "drift" and p95["p_value"] < 0.01
    assert p95["drift"] == pytest.approx(1.03 ** 13 - 1, abs=0.12)  # Sen's straight line through a compounding creep
    assert document["exit_code"] == 1 and SLOW_REFUND_P95 in document["failures"]
    counts = [row for row in document["metrics"] if row["exact"]]
    assert counts and {row["verdict"] for row in counts} == {"pass"}  # nothing else moved


def test_flat_noise_over_two_weeks_passes(flat):
    done = history(*flat)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "no trend beyond its tolerance, exit code 0" in done.stdout
    rows = by_metric(flat[-1])
    assert {row["verdict"] for row in rows.values()} <= {"pass", "not significant"}
    assert rows[SLOW_REFUND_P95]["p_value"] > 0.01
    # the table gives the line the drift is measured on, and says so: drift is no reading of night 1 against the last
    header, row = (line.split() for line in done.stdout.splitlines()
                   if line.startswith(("metric ", f"{SLOW_REFUND_P95} ")))
    assert header[:5] == ["metric", "night", "1", "last", "night"] and "fitted" in header
    fitted = re.search(r"(\d+(?:\.\d+)?)ms → (\d+(?:\.\d+)?)ms", " ".join(row))
    drift = rows[SLOW_REFUND_P95]["drift"]
    assert fitted is not None and float(fitted[2]) / float(fitted[1]) - 1 == pytest.approx(drift, abs=0.01)
    assert "not last minus first" in done.stdout


def test_the_page_has_one_plot_per_gated_metric(creep):
    done = history(*creep, "--output", creep[0].parent / "page")
    assert done.returncode == 1, done.stderr

    page = (creep[0].parent / "page" / "history.html").read_text()
    judged = [row["metric"] for row in by_metric(creep[0].parent / "page").values() if row["p_value"] is not None]
    assert len(judged) >= 10 and page.count("<svg") == len(judged)
    for metric in judged:
        assert page.count(f"<title>{escape(metric)}: ") == 1, metric
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_a_folder_of_another_scenario_is_refused_in_one_line(flat, tmp_path):
    nights = [shutil.copytree(folder, tmp_path / folder.name) for folder in flat[:MIN_NIGHTS - 1]]
    (other,) = write_nights(tmp_path / "other", [1.0], text=SCENARIO.replace('"nightly-compare"', '"soak"'),
                            first_day=MIN_NIGHTS)

    done = history(*nights, other)

    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"mrtr-harness history: {other} is not a night of nightly-compare")  # the odd one
    assert "differ in name" in done.stderr


@pytest.mark.parametrize("damage", ["missing", "not JSON", "a wrong type"])
def test_a_damaged_or_missing_summary_fails_closed_with_exit_4_in_one_line(flat, tmp_path, damage):
    nights = [shutil.copytree(folder, tmp_path / folder.name) for folder in flat[:MIN_NIGHTS]]
    summary = nights[2] / "summary.json"
    if damage == "missing":
        summary.unlink()
    elif damage == "not JSON":
        summary.write_text(summary.read_text()[:200])
    else:
        document = json.loads(summary.read_text())
        document["started"] = "yesterday"
        summary.write_text(json.dumps(document))

    done = history(*nights)

    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(summary) in done.stderr and "mrtr-harness report" in done.stderr
    assert not (nights[-1] / "history.json").exists()


def test_a_night_that_did_not_complete_fails_closed_naming_it(flat, tmp_path):
    nights = [shutil.copytree(folder, tmp_path / folder.name) for folder in flat[:MIN_NIGHTS]]
    shutil.rmtree(nights[2])
    write_run(nights[2], scenario(), flows=150, seed=3, t0=T0 + 2 * DAY, status=EndStatus.INTERRUPTED)
    rebuild_results(nights[2])

    done = history(*nights)

    assert done.returncode == 1, done.stdout + done.stderr
    assert f"run_completed: night that did not complete: {nights[2].name}" in done.stdout
    assert by_metric(nights[-1])["run_completed"]["verdict"] == "cannot be judged"


@pytest.mark.parametrize("claim", ["run id", "start"])
def test_a_night_whose_summary_disagrees_with_its_journal_is_named_and_left_out_not_ordered_by_its_claim(
        flat, tmp_path, claim):
    """A summary.json claiming another run (or another start: here, the newest night's, a month on) cannot move its
    night: the night is named in one line and left out, and the others are judged in their journals' order."""
    nights = [shutil.copytree(folder, tmp_path / folder.name) for folder in flat[:MIN_NIGHTS + 1]]
    forged = nights[1] / "summary.json"
    document = json.loads(forged.read_text())
    if claim == "run id":
        document["run_id"] = "20261231T020000Z-nightly"
    document["started"] = document["started"] + 30 * DAY
    forged.write_text(json.dumps(document))

    done = history(*shuffled(nights))

    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if "left out" in line]
    assert len(said) == 1 and said[0].startswith(f"mrtr-harness history: {nights[1]} left out: its summary.json")
    assert ("20261231T020000Z-nightly" if claim == "run id" else "started at") in said[0], said
    written = json.loads((nights[-1] / "history.json").read_text())
    assert [night["run_id"] for night in written["nights"]] == [night.name for night in nights if night != nights[1]]
    assert written["left_out"] == [{"folder": str(nights[1]), "reason": said[0].split(" left out: ", 1)[1]}]


def test_the_exit_code_table_says_how_many_nights_a_trend_needs():
    (usage,) = [meaning for code, meaning in TABLE["history"] if code == 2]
    assert f"fewer nights than a trend needs ({MIN_NIGHTS})" in usage


def test_too_few_nights_or_the_same_night_twice_exit_2(flat):
    few = history(*flat[:MIN_NIGHTS - 1])
    assert few.returncode == 2 and f"at least {MIN_NIGHTS} nights" in few.stderr, few.stderr

    twice = history(*flat[:MIN_NIGHTS - 1], flat[0])
    assert twice.returncode == 2 and "the same run" in twice.stderr, twice.stderr


def test_mann_kendall_agrees_with_kendalls_tau_against_the_nights_order():
    """S is Kendall's tau's numerator against the order of the nights; the tie-corrected variance is the one scipy's
    asymptotic tau test uses (its p is two-sided and without the continuity correction used here)."""
    noise = random.Random(5)
    for values in ([round(noise.gauss(10, 2)) for _ in range(14)], [1.0 + 0.03 * n for n in range(9)],
                   [0, 0, 0, 1, 0, 2, 2, 3]):
        trend = mann_kendall(values)
        tau = kendalltau(list(range(len(values))), values, method="asymptotic")
        if trend.s:
            assert trend.variance == pytest.approx((trend.s / norm.isf(tau.pvalue / 2)) ** 2)
            assert trend.p_value == pytest.approx(norm.sf((trend.s - 1) / trend.variance ** 0.5))
        mirrored = mann_kendall([-value for value in values])
        assert mann_kendall(values, increasing=False).p_value == pytest.approx(mirrored.p_value)


def test_sens_slope_is_the_median_pairwise_slope_and_shrugs_off_one_odd_night():
    assert sen_slope([1, 2, 3, 4, 5]) == 1
    assert sen_slope([1, 2, 3, 40, 5, 6]) == 1  # one slow night does not tilt the line
    assert mann_kendall([3.0] * 8).p_value == 1.0  # all tied: no evidence either way
    five = mann_kendall([1, 2, 3, 4, 5])
    assert five.p_value > 0.01 and mann_kendall([1, 2, 3, 4, 5, 6]).p_value < 0.01  # hence MIN_NIGHTS


def test_the_workflow_keeps_the_last_14_passing_nights_and_judges_them_from_the_sixth_on(tmp_path):
    """The `history` job runs only after a night that passed, keeps the newest 14 results folders in the cache, and
    runs the guide's `history` line once 6 are kept (fewer is exit 2: a trend cannot be shown yet)."""
    job = _workflow()["jobs"]["history"]
    assert job["needs"] == "nightly"
    steps = {step["name"]: step for step in job["steps"] if "name" in step}
    keep = next(step["run"] for name, step in steps.items() if name.startswith("Keep"))
    judge = next(step["run"] for name, step in steps.items() if name.startswith("Judge"))
    assert "mrtr-harness history history/*-nightly" in judge
    (restore,) = [step for step in job["steps"] if step.get("uses", "").startswith("actions/cache/restore@")]
    (save,) = [step for step in job["steps"] if step.get("uses", "").startswith("actions/cache/save@")]
    assert restore["with"]["path"] == save["with"]["path"] == "history"
    assert restore["with"]["restore-keys"] in save["with"]["key"] and "fail-on-cache-miss" not in restore["with"]

    for kept in (4, 5, 14):
        folder = tmp_path / f"kept-{kept}"
        for day in range(1, kept + 1):
            (night_folder(folder / "history", day)).mkdir(parents=True)
        tonight = night_folder(folder / "results", kept + 1)
        tonight.mkdir(parents=True)
        assert _run_step_script(keep, folder, {}) == []
        names = sorted(path.name for path in (folder / "history").iterdir())
        assert len(names) == min(kept + 1, 14) and names[-1] == tonight.name
        calls = _run_step_script(judge, folder, {})
        assert calls == ([] if kept + 1 < MIN_NIGHTS else
                         [["history", *(f"history/{name}" for name in names)]]), calls
