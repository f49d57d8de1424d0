"""The guides' commands run as written, wherever the stack they need can run in CI.

tests/test_docs_commands.py parses every `mrtr-harness` line of README.md and docs/*.md;
this module makes sure each one also runs, or says why it cannot. Every documented line is
in exactly one place in `PLAN` below:

* `here`: run by the named test of this module, in a folder that holds the checkout's
  `scenarios/` (a link), so a line's relative paths and its default `results/` work as in a
  user's checkout. The line goes through bash as written (globs and all), `mrtr-harness`
  being this checkout's `python -m harness`. A long run gets only `--duration` added after
  the line as written (argparse keeps the last one), and a fixed port is moved to a free one
  the same way. The guides' results folders
  (results/20261201T061500Z-nightly ...) are examples: the folder the on-call run left is
  copied under those names, and the lines naming them run as written.
* `compose`: run against the shipped stack by tests/test_compose_stack.py's stack test
  (the stack is brought up once, there).
* `elsewhere`: already run as written by the named test (its `run_harness` adds only
  `--results` and `--quiet`, and the differences are said).
* `not run`: why: it needs a deployment this suite does not have, or it is too long.

A line added to a guide fails `test_every_guide_command_runs_somewhere_or_says_why_not`
until it is put in one of them. What the runs here cost: one run of the on-call
catalogue's slow-leads scenario, shortened to 4 s, shared by the module; every other line
is a short command (`--durations` shows each).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.guides import commands
from tests.harness_run import KEY_LINE, ROOT, valid_summary
from tests.services import free_port


@dataclass(frozen=True)
class Plan:
    kind: str
    """here | compose | elsewhere | not run"""
    what: str
    """here: a test of this module; compose and elsewhere: FILE::TEST and how it runs the line; not run: why."""


ON_CALL_RUN = ("mrtr-harness run --reproduce scenarios/on-call/slow-leads.toml --duration 20s --seed 3 "
               "--metrics-port 9464")
VALIDATE = "mrtr-harness validate scenarios/on-call/*.toml"
REPORT = "mrtr-harness report results/20261201T061500Z-nightly"
COMPARE = "mrtr-harness compare results/20261130T021700Z-nightly results/20261201T021700Z-nightly"
HISTORY = "mrtr-harness history history/*-nightly"
TRIAGE_ONCE = "mrtr-harness triage --file app.log --once --json"
KEYRING = "mrtr-harness shop keyring ring"
DOCKER_TRIAGE = ("mrtr-harness triage --docker-service replica1 replica2 replica3 --docker-project mrtr "
                 "--metrics-port 9465")
NIGHTLY_TOO_LONG = ("nightly.toml's chaos runs until 22 s of its 36 s (a shorter --duration is refused), too long "
                    "for the suite; the guide's night one, night two and refusal of a missing baseline run on the "
                    "smoke scenario in tests/test_compare.py::test_night_one_becomes_the_baseline_night_two_compares_"
                    "with_it_and_no_baseline_fails_closed")
CAPACITY = "a sweep of several steps of a minute each (docs/capacity-planning.md says how long); the guide's sample " \
           "is checked against the shipped scenario by tests/test_capacity_guide.py"

YOUR_SERVER_SWEEP = "an external target (your server) and a sweep of several minutes"

INIT_RUN = ("tests/test_init.py::test_a_scenario_from_two_sdk_example_servers_names_every_tool_validates_and_"
            "runs_over_both (init, validate and run on the SDK's example servers on free ports, in place of the "
            "guide's URLs)")

FROM_TRIAGE = ("tests/test_hunt_from_triage.py::test_a_real_incidents_triage_steers_a_hunt_to_a_minimal_scenario_that_"
               "reproduces_its_reason (an on-call scenario's replica logs triaged with --once --json, then hunted "
               "from that file; on a shop whose keys fail a restart, in place of smoke.toml)")

SHARES = ("tests/test_hunt_merge.py::test_two_shares_merged_count_the_trials_and_coverage_of_one_hunt_over_the_whole_"
          "range (two --trial-range shares of one seed, merged, against one hunt over the whole range; a small "
          "shop's scenario in place of smoke.toml)")

PLAN: dict[str, Plan] = {
    # README.md and docs/running.md
    "mrtr-harness run scenarios/smoke.toml": Plan(
        "elsewhere", "tests/test_live_fold.py::test_a_runs_own_results_equal_a_rebuild_from_its_journal_alone "
                     "(with --duration 8s)"),
    VALIDATE: Plan("here", "test_validating_the_catalogue_checks_every_file_and_starts_nothing"),
    "mrtr-harness schema": Plan(
        "elsewhere", "tests/test_schema.py::test_the_printed_schema_is_what_docs_scenario_schema_json_holds (runs it "
                     "as written and compares what it prints with docs/scenario.schema.json)"),
    "mrtr-harness run scenarios/nightly.toml": Plan("not run", NIGHTLY_TOO_LONG),
    "mrtr-harness run scenarios/spike.toml --web 8089": Plan(
        "not run", "its stages fix 35 s of load (a --duration cannot shorten them) and --web holds port 8089; the "
                   "web UI is run by tests/test_web_ui.py on a free port"),
    ON_CALL_RUN: Plan("here", "test_the_on_call_run_reproduces_expired_and_leaves_a_results_folder"),
    REPORT: Plan("here", "test_report_rebuilds_a_results_folder_with_the_runs_verdict"),
    COMPARE: Plan("here", "test_compare_of_two_results_folders_writes_its_comparison"),
    HISTORY: Plan("here", "test_history_over_the_kept_nights_judges_their_trends"),
    "mrtr-harness run scenarios/compose.toml --master --expect-workers 2 --master-bind-host 0.0.0.0": Plan(
        "not run", "a master waiting for two workers on other machines; local workers are run by "
                   "tests/test_distributed.py"),
    "mrtr-harness worker --master-host master.example --master-port 5557": Plan(
        "not run", "needs a master at master.example"),
    "mrtr-harness run scenarios/fuzz.toml": Plan(
        "not run", "a 30 s run whose thresholds need every mutant class; a shorter --duration misses the rare "
                   "ones (unknown key) and fails; the shop's answer to each class is run by tests/test_fuzz.py"),
    # docs/capacity-planning.md
    "mrtr-harness capacity scenarios/capacity.toml --replicas 1,2 --rates 2,4,8": Plan("not run", CAPACITY),
    "mrtr-harness capacity scenarios/capacity.toml --replicas 1-3 --search 4:128 --peak 20": Plan("not run", CAPACITY),
    "mrtr-harness capacity scenarios/capacity.toml --rates 2,4 --replicas 1 --step 10s --results "
    "/tmp/capdocs/results": Plan("not run", CAPACITY),
    "mrtr-harness capacity scenarios/external/capacity.toml --rates 2,4,8,16": Plan("not run", YOUR_SERVER_SWEEP),
    "mrtr-harness capacity scenarios/external/capacity.toml --replicas 1-4 --search 2:64 --peak 20": Plan(
        "not run", YOUR_SERVER_SWEEP),
    # README.md and docs/running.md: a scenario from your server
    "mrtr-harness init http://127.0.0.1:8000/mcp -o scenario.toml": Plan("elsewhere", INIT_RUN),
    "mrtr-harness init http://10.0.0.5:8000/mcp http://10.0.0.6:8000/mcp -o scenario.toml": Plan("elsewhere", INIT_RUN),
    "mrtr-harness validate scenario.toml": Plan("elsewhere", INIT_RUN),
    "mrtr-harness run scenario.toml": Plan("elsewhere", INIT_RUN),
    "mrtr-harness init https://mcp.example.com/mcp -o scenario.toml --client-id harness": Plan(
        "elsewhere", "tests/test_init.py::test_a_server_behind_oauth_gets_target_auth_naming_the_secrets_variable_"
                     "and_validates (a test OAuth server on a free port in place of the guide's host)"),
    "mrtr-harness capacity scenarios/capacity.toml --replicas 1-4 --rates 25,50,100,200 --workers 4": Plan(
        "elsewhere", "tests/test_capacity.py::test_a_sweep_spreads_each_step_over_its_replicas_and_its_load_over_two_"
                     "workers (the same options at a size this machine runs: 2 rates, 2 workers, short steps)"),
    "mrtr-harness capacity scenarios/external/capacity.toml --replicas 1-4 --search 50:400      --master "
    "--expect-workers 4 --master-bind-host 0.0.0.0": Plan(
        "not run", "your server, and workers started on other machines; a local --workers sweep is run by "
                   "tests/test_capacity.py"),
    # docs/nightly-ci.md
    "mrtr-harness run scenarios/external/nightly.toml --baseline baseline-external --first-baseline": Plan(
        "elsewhere", "tests/test_external_examples.py::test_the_nightly_example_night_one_on_your_own_replicas_"
                     "passes_and_becomes_the_baseline (on a copy edited as the guide says, for the shop started "
                     "by hand, with --duration 6s)"),
    "mrtr-harness run scenarios/external/nightly.toml --baseline baseline-external": Plan(
        "not run", "your server; night one's command is run on the shop started by hand by tests/test_external_"
                   "examples.py, and a later night is that command without --first-baseline (see the lines above)"),
    "mrtr-harness run scenarios/nightly.toml --baseline baseline --first-baseline": Plan("not run", NIGHTLY_TOO_LONG),
    "mrtr-harness run scenarios/nightly.toml --baseline baseline": Plan("not run", NIGHTLY_TOO_LONG),
    "mrtr-harness hunt scenarios/nightly.toml --trials 20 --trial-duration 8s --budget 10m --shrink-budget 10m "
    "--reproduce 5 --corpus hunt-corpus --corpus scenarios/on-call": Plan(
        "not run", "a hunt of 20 trials of 8 s (about 5 minutes, more on a find); a hunt that replays its corpus "
                   "first, finds an entry again and skips what it cannot replay is run by tests/test_hunt_corpus.py::"
                   "test_a_hunt_replays_its_corpus_first_with_the_entry_s_seed_and_finds_it_again"),
    'mrtr-harness report "$night"': Plan(
        "not run", "promotes a night of nightly.toml (see above); the promotion step's shell is run with its "
                   "verdict both ways by tests/test_compare.py::test_the_nightly_workflow_fails_closed_and_saves_"
                   "a_baseline_only_on_purpose, and report itself here"),
    # docs/on-call.md
    "mrtr-harness triage --file /var/log/mcp/r1.log@r1 --file /var/log/mcp/r2.log@r2": Plan(
        "not run", "your deployment's log files, followed live; followed files are run by tests/test_triage.py"),
    "mrtr-harness triage --once --json --file logs/r1.log@r1 --file logs/r2.log@r2 > rejections.json": Plan(
        "elsewhere", FROM_TRIAGE),
    "mrtr-harness hunt scenarios/smoke.toml --from-triage rejections.json": Plan("elsewhere", FROM_TRIAGE),
    "mrtr-harness hunt scenarios/smoke.toml --seed 7 --trials 20 --trial-range 1:10 --results results/0": Plan(
        "elsewhere", SHARES),
    "mrtr-harness hunt scenarios/smoke.toml --seed 7 --trials 20 --trial-range 11:20 --results results/1": Plan(
        "elsewhere", SHARES),
    "mrtr-harness hunt merge results/0/*-hunt-smoke results/1/*-hunt-smoke": Plan("elsewhere", SHARES),
    "mrtr-harness hunt scenarios/smoke.toml --trials 30 --shares 3": Plan(
        "elsewhere", "tests/test_hunt_shares.py::test_a_find_in_one_share_stops_the_other_and_the_merged_hunt_names_it "
                     "(two shares of 16 trials of a shop with a planted fault, in place of three of smoke.toml's 30: "
                     "a find in one stops the other, and the merge names it)"),
    'mrtr-harness hunt merge "./${job#job.batch/}"/*/*-hunt-*': Plan(
        "elsewhere", "tests/test_kubernetes_hunt.py::test_the_job_simulated_here_two_pods_shares_merge_into_one_hunt "
                     "(each pod's command run as a process for its index, then merged; the guide's own lines are "
                     "checked by test_the_guide_creates_the_job_copies_the_shares_out_and_merges_them)"),
    "mrtr-harness triage --kubernetes mrtr:app.kubernetes.io/name=mcp": Plan(
        "elsewhere", "tests/test_kubernetes_logs.py::test_triage_follows_the_pods_of_a_selector_as_they_are_replaced "
                     "(a kubectl on PATH that plays a cluster whose pods are replaced)"),
    "mrtr-harness triage --stdin": Plan("not run", "needs a Kubernetes cluster (kubectl logs on its left)"),
    DOCKER_TRIAGE: Plan("compose", "tests/test_compose_stack.py::check_the_guides_docker_triage (the metrics port "
                                   "moved to a free one, as every port of the stack there is)"),
    TRIAGE_ONCE: Plan("here", "test_triage_of_a_replicas_log_counts_what_the_run_counted"),
    "mrtr-harness run --reproduce scenarios/on-call/rotation-minter-first.toml": Plan(
        "elsewhere", "tests/test_catalogue.py::test_each_on_call_scenario_produces_its_reason"),
    "mrtr-harness run scenarios/on-call/rotation-minter-first.toml": Plan(
        "not run", "the fix's step, once the user has made the change the file's comments name; unchanged, the "
                   "fault is in the file and it exits 1, as tests/test_catalogue.py::test_each_on_call_scenario_"
                   "produces_its_reason shows by judging slow-leads' run by [expect]"),
    "mrtr-harness validate scenarios/external/on-call-rotation.toml": Plan(
        "elsewhere", "tests/test_external_examples.py::test_validate_warns_of_the_unset_secret_in_the_words_each_"
                     "guide_shows (with the other two examples on the same command line)"),
    "mrtr-harness run scenarios/external/on-call-rotation.toml": Plan(
        "not run", "an external target whose chaos are your deployment's commands: needs your server"),
    # docs/shop-auth.md
    "mrtr-harness run scenarios/oauth.toml": Plan(
        "elsewhere", "tests/test_shop_auth.py::test_the_oauth_scenario_without_its_secret_variable_runs_on_a_"
                     "throwaway_secret_and_says_so (with --duration 2s)"),
    "mrtr-harness shop auth-server --port 9000 --admin-port 9001 --client-id support-leads --client-secret-env "
    "MCP_CLIENT_SECRET": Plan("not run", "a server that runs until stopped, on fixed ports; started on free ports "
                                         "by tests/test_shop_auth.py's shop fixture"),
    "mrtr-harness shop replica --port 8101 --api http://127.0.0.1:8100 --auth-issuer http://127.0.0.1:9000": Plan(
        "not run", "a server that runs until stopped, on a fixed port, beside the two above"),
    # docs/your-deployment.md
    KEYRING: Plan("here", "test_the_keyring_line_writes_a_ring_of_keys"),
    "mrtr-harness run scenarios/kubernetes.toml": Plan("not run", "an external target: needs your Kubernetes "
                                                                  "deployment"),
    # README.md and docs/running.md: the harness as an MCP server
    "mrtr-harness mcp": Plan(
        "elsewhere", "tests/test_mcp_server.py::test_the_server_lists_its_tools_validates_refuses_an_unbounded_run_"
                     "and_triages (the SDK's stdio client starts it as `python -m harness mcp`, with --results and "
                     "--max-duration added, and talks to it over its standard input and output)"),
}

DOCUMENTED = commands()


def test_every_guide_command_runs_somewhere_or_says_why_not():
    lines = {line for _, line in DOCUMENTED}
    unplanned = sorted(where for where, line in DOCUMENTED if line not in PLAN)
    assert not unplanned, f"guide lines not in PLAN (run them here, or say where or why not): {unplanned}"
    assert not set(PLAN) - lines, f"PLAN names lines no guide shows any more: {sorted(set(PLAN) - lines)}"


def _defines(file: str, name: str) -> bool:
    return re.search(rf"^def {re.escape(name)}\(", (ROOT / file).read_text(encoding="utf-8"), re.MULTILINE) is not None


@pytest.mark.parametrize("line", [line for line, plan in PLAN.items() if plan.kind != "not run"], ids=str)
def test_each_line_run_somewhere_names_a_test_that_exists(line: str):
    plan = PLAN[line]
    assert plan.kind in ("here", "compose", "elsewhere"), plan
    file, name = ("tests/test_guides_run.py", plan.what) if plan.kind == "here" else plan.what.split()[0].split("::")
    assert _defines(file, name), f"{line}: {file} has no {name}"


# --- the lines run here -------------------------------------------------------------------------------


def run_line(line: str, folder: Path, *added: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`line` as a reader pastes it into bash in `folder`, with `added` words after it; `mrtr-harness` is this
    checkout's."""
    assert PLAN[line].kind == "here", line
    script = f'mrtr-harness() {{ "$MRTR_PYTHON" -m harness "$@"; }}\n{line} {shlex.join(added)}'
    env = {**os.environ, "MRTR_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the guides' relative paths work: the checkout's scenarios/, and nothing else."""
    folder = tmp_path_factory.mktemp("checkout")
    (folder / "scenarios").symlink_to(ROOT / "scenarios", target_is_directory=True)
    return folder


@dataclass
class Ran:
    done: subprocess.CompletedProcess[str]
    folder: Path


@pytest.fixture(scope="module")
def on_call_run(checkout: Path) -> Iterator[Ran]:
    """The README's on-call line, run once for this module with `--duration 4s` added (its 20 s would be most of
    the suite's cost for this module, and 4 s of leads slower than the TTL already expire states on both
    replicas) and `--metrics-port` moved to a free port (another worker's copy of this module, or anything
    else on the machine, may hold 9464). The tests that read its folder stop here if it did not pass."""
    done = run_line(ON_CALL_RUN, checkout, "--duration", "4s", "--metrics-port", str(free_port()), timeout=120)
    folders = sorted((checkout / "results").glob("*-slow-leads"))
    if done.returncode != 0 or len(folders) != 1:
        pytest.fail(f"the on-call run exited {done.returncode}:\n{done.stdout}{done.stderr}", pytrace=False)
    yield Ran(done, folders[0])


def test_the_on_call_run_reproduces_expired_and_leaves_a_results_folder(on_call_run: Ran):
    output = on_call_run.done.stdout + on_call_run.done.stderr
    assert on_call_run.done.returncode == 0, output
    assert f"results in results/{on_call_run.folder.name}" in output
    summary = valid_summary(on_call_run.folder / "summary.json")
    assert summary["status"] == "completed" and summary["exit_code"] == 0 and summary["judged"] == "reproduces"
    assert sum(summary["rejections"]["by_reason"]["expired"].values()) > 0, summary["rejections"]


def test_validating_the_catalogue_checks_every_file_and_starts_nothing(checkout: Path):
    done = run_line(VALIDATE, checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted((ROOT / "scenarios" / "on-call").glob("*.toml"))
    said = [line for line in done.stdout.splitlines() if ": ok (" in line]
    assert [line.split(":")[0] for line in said] == [f"scenarios/on-call/{path.name}" for path in files], done.stdout


def _as_named(ran: Ran, checkout: Path, *names: str) -> list[Path]:
    """The on-call run's results folder copied under each of the guide's example names, in results/."""
    copies = [checkout / "results" / name for name in names]
    for copy in copies:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(ran.folder, copy)
    return copies


def test_report_rebuilds_a_results_folder_with_the_runs_verdict(on_call_run: Ran, checkout: Path):
    (folder,) = _as_named(on_call_run, checkout, "20261201T061500Z-nightly")
    for rebuilt in ("summary.json", "junit.xml", "report.html"):
        (folder / rebuilt).unlink()
    done = run_line(REPORT, checkout)
    assert done.returncode == 0, done.stdout + done.stderr  # the run's own verdict, read back from its journal
    assert "rebuilt summary.json, junit.xml and report.html in results/20261201T061500Z-nightly" in done.stderr
    summary = valid_summary(folder / "summary.json")
    assert (summary["exit_code"], summary["judged"]) == (0, "reproduces")  # the table the run's journal names
    assert (folder / "junit.xml").is_file() and (folder / "report.html").is_file()


def test_compare_of_two_results_folders_writes_its_comparison(on_call_run: Ran, checkout: Path):
    """The guide's two nights are two copies of one run here: compare says so, and finds no regression."""
    _, current = _as_named(on_call_run, checkout, "20261130T021700Z-nightly", "20261201T021700Z-nightly")
    done = run_line(COMPARE, checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "one run, compared with itself, cannot regress" in done.stderr
    assert "no regression, exit code 0" in done.stdout
    assert json.loads((current / "compare.json").read_text())["regressed"] is False


def test_history_over_the_kept_nights_judges_their_trends(checkout: Path):
    """The guide's history/ holds six nights of one scenario here, written as tests/test_history.py writes them
    (journals through the harness's writer, results by `report`): no trend, exit 0, the page in the newest."""
    from tests.test_history import write_nights

    nights = write_nights(checkout / "history", [1.0, 1.02, 0.98, 1.01, 0.99, 1.0])
    done = run_line(HISTORY, checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "history: nightly-compare, 6 nights" in done.stdout and "exit code 0" in done.stdout
    newest = nights[-1]
    assert (newest / "history.html").is_file() and json.loads((newest / "history.json").read_text())["exit_code"] == 0


def test_triage_of_a_replicas_log_counts_what_the_run_counted(on_call_run: Ran, checkout: Path):
    """A replica's log of the on-call run as the guide's app.log: triage counts its expired states, as many as
    the run's summary counted for that replica, and exits 0 (expired is not tampering)."""
    shutil.copyfile(on_call_run.folder / "target" / "logs" / "r1.log", checkout / "app.log")
    done = run_line(TRIAGE_ONCE, checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    counted = json.loads(done.stdout)
    expired = valid_summary(on_call_run.folder / "summary.json")["rejections"]["by_reason"]["expired"]["r1"]
    assert counted["rejections"] == counted["by_reason"]["expired"] == expired > 0, counted


def test_the_keyring_line_writes_a_ring_of_keys(checkout: Path):
    done = run_line(KEYRING, checkout)
    assert done.returncode == 0, done.stdout + done.stderr
    ring = (checkout / "ring").read_bytes()
    assert KEY_LINE.search(ring), ring[:200]
