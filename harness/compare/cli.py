"""`mrtr-harness compare BASELINE CURRENT`, the comparison `mrtr-harness run --baseline DIR` ends with, and
`mrtr-harness history DIR...`, the same metrics' trends over many nights.

    mrtr-harness compare results/20261130T020000Z-nightly results/20261201T020000Z-nightly
    mrtr-harness compare BASE CUR --tolerance round_duration.p95=20% --tolerance completed_ratio=2%
    mrtr-harness history history/*

Exit codes: 0 no regression (no trend beyond tolerance); 1 a regression, or a drift (what cannot
be judged included: docs/nightly-ci.md); 2 bad input (a folder that is not a run's results, runs
of different scenarios without --force, a bad tolerance, a baseline that did not complete, an
--output that cannot be written; for history, too few nights); 4 for history, a night whose
summary.json is missing or damaged.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.atomic_files import PlantedLink, write_atomically
from harness.errors import ExitCode
from harness.exit_codes import epilog
from harness.vocabulary import TOLERANCE_KEYS

if TYPE_CHECKING:
    from harness.config.scenario import Scenario

def add_parser(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser(
        "compare", help="compare a run with a baseline run: regressions in latency, rounds, completion, counts",
        description="Read two results folders' journals and compare, per flow, tool and round: round latency "
                    "p50/p95/p99, rounds per call, completion share, flows/s, rejections by reason, client "
                    "errors, invariant violations, CPU per round when both runs measured it, and the replicas' "
                    "memory growth (replica_rss_growth) when both runs fitted it. A sampled metric regresses "
                    "when it is worse by more than its tolerance and a one-sided Mann-Whitney test finds the "
                    "change real; counts compare exactly. Tolerances come from the current run's "
                    "[compare] table, then --tolerance. Writes compare.json, compare-junit.xml and compare.html.",
        epilog=epilog("compare"))
    compare.add_argument("baseline", type=Path, help="the baseline run's results folder")
    compare.add_argument("current", type=Path, help="the results folder of the run to judge")
    add_tolerance_options(compare)
    compare.add_argument("--force", action="store_true",
                         help="compare runs of different scenarios (the differing fields are reported)")
    compare.add_argument("--output", type=Path, default=None,
                         help="folder for compare.json, compare-junit.xml and compare.html (default: CURRENT)")
    compare.set_defaults(handler=run_compare)


def add_history_parser(commands: argparse._SubParsersAction) -> None:
    from harness.compare.trend import MIN_NIGHTS  # stdlib only: the command line stays instant

    history = commands.add_parser(
        "history", help="trends over many nights of one scenario: each gated metric over time, and a drift gate",
        description="Read the results folders of many nights of one scenario (ordered by when each run's load "
                    "started, not by the order given) and follow every metric `compare` gates over them: a "
                    "table, history.json and history.html (one plot per metric). A metric fails when it drifts "
                    "the worse way: a significant Mann-Kendall trend (one-sided, at the [compare] table's "
                    "significance) whose size, Sen's slope times the nights it spans relative to the first "
                    "night's fitted value, is beyond the metric's [compare] tolerance (counts: any growth). "
                    "A p95 creeping up 3%% a night fails after two weeks though every night passes its compare "
                    f"with the one before. At least {MIN_NIGHTS} nights; the newest night's [compare] table, "
                    "then --tolerance, sets the tolerances.",
        epilog=epilog("history"))
    history.add_argument("nights", type=Path, nargs="+", metavar="DIR",
                         help="the results folders of the nights, e.g. history/* (any order)")
    add_tolerance_options(history)
    history.add_argument("--output", type=Path, default=None,
                         help="folder for history.json and history.html (default: the newest night's folder)")
    history.set_defaults(handler=run_history)


def run_history(args: argparse.Namespace) -> int:
    from harness.compare.folders import OutputNotWritable, output_folder
    from harness.compare.history import DamagedNight, history_of
    from harness.compare.history_outputs import HISTORY_HTML, HISTORY_JSON, render_table, write_json
    from harness.compare.history_page import write_page

    if args.output:
        output_folder(args.output)  # OutputNotWritable: exit 2, before the nights are read
    try:
        history = history_of(args.nights, tolerances=args.tolerance, significance=args.significance)
    except DamagedNight as exc:  # a data error: one line, exit 4 (not a traceback: the harness did not fail)
        print(f"mrtr-harness history: {exc}", file=sys.stderr)
        return ExitCode.HARNESS
    for left_out in history.left_out:
        print(f"mrtr-harness history: {left_out.line()}", file=sys.stderr)
    output = args.output or history.nights[-1].run.folder
    try:
        write_json(output / HISTORY_JSON, history)
        write_page(output / HISTORY_HTML, history)
    except OSError as exc:
        raise OutputNotWritable(f"cannot write the history into {output}: {exc.strerror or exc}") from None
    print(render_table(history))
    print(f"wrote {HISTORY_JSON} and {HISTORY_HTML} in {output}", file=sys.stderr)
    return history.exit_code


def add_tolerance_options(parser: argparse.ArgumentParser) -> None:
    """--tolerance and --significance, shared by `compare` and `run --baseline`."""
    parser.add_argument("--tolerance", action="append", default=[], metavar="KEY=PERCENT",
                        help="override one tolerance of the [compare] table, e.g. round_duration.p95=20%%; "
                             f"keys: {', '.join(TOLERANCE_KEYS)} (repeatable)")
    parser.add_argument("--significance", type=float, default=None,
                        help="the p-value under which a change counts as real (default: the table's, 0.01)")


def run_compare(args: argparse.Namespace) -> int:
    from harness.compare.folders import compare_folders, output_folder, write_outputs
    from harness.compare.outputs import render_table

    output = output_folder(args.output) if args.output else args.current  # OutputNotWritable: exit 2, early
    comparison = compare_folders(args.baseline, args.current, tolerances=args.tolerance,
                                 significance=args.significance, force=args.force)  # NotComparable: exit 2
    for warning in comparison.warnings:
        print(f"mrtr-harness compare: warning: {warning}", file=sys.stderr)
    if comparison.scenario_differences:
        print(f"mrtr-harness compare: --force: the scenarios differ in {', '.join(comparison.scenario_differences)}",
              file=sys.stderr)
    write_outputs(comparison, output)
    print(render_table(comparison))
    print(f"wrote compare.json, compare-junit.xml and compare.html in {output}", file=sys.stderr)
    return comparison.exit_code


FIRST_BASELINE_HINT = "with no baseline yet, add --first-baseline and this run becomes it"


def check_baseline_options(args: argparse.Namespace, scenario: Scenario) -> str | None:
    """Before a `run` starts anything: what is wrong with its --baseline, --first-baseline and tolerances, or None.

    A missing baseline is never skipped quietly: without --first-baseline it is a usage
    error naming the flag, and with it the folder must not hold a run yet, so a flag left
    on after the first night fails rather than judging nothing.
    """
    if args.baseline is None:
        if args.first_baseline:
            return "--first-baseline needs --baseline DIR: the folder this run is kept in as the baseline"
        if args.tolerance or args.significance is not None:
            return "--tolerance and --significance judge a comparison: they need --baseline DIR"
        return None
    if args.first_baseline:
        return _check_first_baseline(args.baseline, args.results)
    if not args.baseline.exists():
        return f"--baseline {args.baseline} does not exist: {FIRST_BASELINE_HINT}"
    return check_baseline(args.baseline, scenario, args)


def _check_first_baseline(baseline: Path, results: Path) -> str | None:
    """--first-baseline: DIR is where the run will be kept: absent or an empty folder, apart from --results."""
    if baseline.resolve() in (results.resolve(), *results.resolve().parents):
        return f"--first-baseline: --baseline {baseline} would hold the --results folder {results}: keep them apart"
    if not baseline.exists():
        return None
    if not baseline.is_dir():
        return f"--first-baseline: --baseline {baseline} is a file, not a folder to keep this run in"
    if any(baseline.iterdir()):
        return (f"--first-baseline: --baseline {baseline} already holds files (a baseline?): drop --first-baseline "
                "to compare with it, or empty the folder to start a new baseline")
    return None


def keep_first_baseline(folder: Path, baseline: Path, exit_code: int) -> int:
    """`run --first-baseline`: a run that passed is copied to the baseline folder; any other run is not kept.

    The copy is the whole results folder, as `run --baseline DIR` and `compare` read it.
    """
    import shutil

    from harness.errors import UsageError

    if exit_code != ExitCode.PASSED:
        print(f"mrtr-harness run: --first-baseline: not kept as the baseline: the run did not pass (exit "
              f"{exit_code}); {baseline} stays empty", file=sys.stderr)
        return exit_code
    try:
        shutil.copytree(folder, baseline, dirs_exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--first-baseline: the run passed but could not be copied to {baseline}: "
                         f"{exc.strerror or exc}") from None
    print(f"mrtr-harness run: --first-baseline: this run is now the baseline, copied to {baseline}; the next run "
          f"with --baseline {baseline} is compared with it", file=sys.stderr)
    return exit_code


def check_baseline(baseline: Path, scenario: Scenario, args: argparse.Namespace) -> str | None:
    """Before a `run --baseline` starts anything: the reason the comparison could not be made, or None.

    The baseline's scenario.json and its figures (the ones it saved, when it completed) are
    read here and the tolerances settled now, so a wrong folder, a baseline of another
    scenario or one that did not complete, or a bad `--tolerance` exits 2 before the target
    starts rather than after the whole run.
    """
    from harness.compare.folders import RUN_HINT, check_baseline_run, check_comparable
    from harness.compare.samples import read_results
    from harness.compare.tolerances import settle
    from harness.errors import UsageError
    from harness.report import SCENARIO_JSON, is_results, results_scenario

    if not is_results(baseline):
        return (f"--baseline {baseline} is not a results folder: it has no {SCENARIO_JSON} and journal.jsonl "
                f"({FIRST_BASELINE_HINT})")
    try:
        settle(scenario.compare, args.tolerance, args.significance)
        check_comparable(results_scenario(baseline), scenario, hint=RUN_HINT)
        check_baseline_run(read_results(baseline))  # from the figures it saved, when it completed
    except UsageError as exc:  # NotComparable, ToleranceError, NotResults, UnreadableJournal
        return f"--baseline {baseline}: {exc}"
    except ValueError as exc:
        return f"--baseline {baseline}: its {SCENARIO_JSON} is not a scenario this harness reads: {exc}"
    return None


def compare_after_run(baseline: Path, folder: Path, exit_code: int, args: argparse.Namespace) -> int:
    """Compare a finished run with its baseline and fold the result into its exit code and summary.json.

    A regression turns a passing run (0) into a failed one (1); a run that already failed
    or could not judge (1-4) keeps its code. The comparison is written beside the run's
    own results and summarised under summary.json's `compare` key. A run that did not
    finish its results (the target never came up, a harness error) is not compared.
    """
    from harness.compare.folders import NotComparable, compare_folders, write_outputs
    from harness.compare.outputs import render_table

    if exit_code not in (ExitCode.PASSED, ExitCode.FAILED):
        print(f"mrtr-harness run: not compared with {baseline}: the run ended with exit code {exit_code}",
              file=sys.stderr)
        return exit_code
    try:
        comparison = compare_folders(baseline, folder, tolerances=args.tolerance, significance=args.significance)
    except NotComparable as exc:
        print(f"mrtr-harness run: not compared with {baseline}: {exc}", file=sys.stderr)
        return ExitCode.USAGE if exit_code == ExitCode.PASSED else exit_code
    try:
        write_outputs(comparison, folder)
        print(render_table(comparison), file=sys.stderr)
        return fold_comparison(folder, {
            "baseline": str(baseline), "regressed": bool(comparison.regressions),
            "regressions": [result.metric for result in comparison.regressions],
            "exit_code": comparison.exit_code, "run_exit_code": exit_code,
            "files": ["compare.json", "compare-junit.xml", "compare.html"]}, exit_code)
    except PlantedLink as exc:  # planted in the run's own folder while it ran: the harness's error, as for the run
        print(f"mrtr-harness run: harness error: {exc}", file=sys.stderr)
        return ExitCode.HARNESS


def recorded_comparison(folder: Path) -> dict[str, Any] | None:
    """The `compare` key a `run --baseline` folded into the folder's summary.json, if any (a rebuild keeps it)."""
    try:
        compare = json.loads((folder / "summary.json").read_text(encoding="utf-8")).get("compare")
    except (OSError, ValueError, AttributeError):
        return None
    return compare if isinstance(compare, dict) and isinstance(compare.get("exit_code"), int) else None


def fold_comparison(folder: Path, compare: dict[str, Any], exit_code: int) -> int:
    """Put a comparison into the folder's summary.json (`compare`); the run's exit code with its regression folded in.

    `run --baseline` folds the comparison it just made; `report` folds the one it found
    before rebuilding: that comparison read the same journal the rebuild did, so it still
    holds, and the baseline it was made against may be gone, so it is kept, not made again.
    """
    _add_to_summary(folder / "summary.json", compare)
    if exit_code not in (ExitCode.PASSED, ExitCode.FAILED):
        return exit_code
    return max(exit_code, compare["exit_code"])


def _add_to_summary(path: Path, compare: dict[str, Any]) -> None:
    """summary.json gains a `compare` key (the run's own keys stay as its journal decided them)."""
    if not path.is_file():
        return
    document = json.loads(path.read_text(encoding="utf-8"))
    document["compare"] = compare
    write_atomically(path, json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
