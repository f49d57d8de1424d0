"""`mrtr-harness hunt SCENARIO`: search for the chaos schedule that breaks the scenario's property.

    mrtr-harness hunt scenarios/smoke.toml --trials 30 --trial-duration 8s
    mrtr-harness hunt scenarios/smoke.toml --actions restart,rotate-keys --replicas 1,2 --seed 7
    mrtr-harness hunt scenarios/smoke.toml --shrink-runs 30 --shrink-budget 10m --reproduce 10
    mrtr-harness hunt scenarios/smoke.toml --controls 3 --expect
    mrtr-harness hunt scenarios/smoke.toml --corpus hunt-corpus --corpus scenarios/on-call
    mrtr-harness hunt scenarios/smoke.toml --strategy cover --trials 40
    mrtr-harness hunt scenarios/smoke.toml --from-triage rejections.json
    mrtr-harness hunt scenarios/smoke.toml --seed 7 --trial-range 1:10    # one machine's share
    mrtr-harness hunt scenarios/smoke.toml --shares 2                   # two trials at a time, merged
    mrtr-harness hunt merge results/*-hunt-smoke                        # the shares as one hunt

Every bound is a `[hunt]` key (docs/scenario.md); a flag wins over the file, and both are
checked as `validate` checks the file. Imports stay inside the handler: Locust must patch
gevent before anything else loads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config.hunt import BOUND_FLAGS
from harness.config.remote import add_allow_host
from harness.exit_codes import epilog

if TYPE_CHECKING:
    from harness.hunt.from_triage import Steering
    from harness.hunt.model import HuntResult
    from harness.hunt.search import Hunt
    from harness.hunt.trial import Base


def add_parser(commands: argparse._SubParsersAction) -> None:
    hunt = commands.add_parser(
        "hunt", help="search for a chaos schedule that breaks the scenario: trials drawn from every chaos action",
        description="First run --controls trials without chaos: a deployment that fails one fails without chaos "
                    "(exit 1, nothing searched). Then draw chaos schedules (actions, replicas, timing and "
                    "parameters, from every action the target can take; the start says which are left out and "
                    "why; --strategy says how), run each as a trial (a real run of the scenario with that "
                    "[[chaos]], judged by the property: no invariant violated, no unexplained -32602, the steady "
                    "state of [hypothesis] held during and after the chaos; the scenario's [expect] only with "
                    "--expect), until one fails or the budget runs out. A failing schedule is "
                    "then shrunk to the smallest that still fails the same way (in --must-fail of --reruns runs, "
                    "within --shrink-budget and --shrink-runs), rerun --reproduce times for its rate, and handed "
                    "over as minimal.toml (`mrtr-harness run --reproduce` reproduces it) and hunt.html in the "
                    "hunt's folder. Each trial's results folder holds its scenario.toml (`mrtr-harness run` reruns "
                    "it as drawn); hunt.jsonl journals every trial and the shrink. Bounds come from the scenario's "
                    "[hunt] table; these flags override it.",
        epilog=epilog("hunt"))
    hunt.add_argument("scenario", type=Path, help="scenario file (TOML), e.g. scenarios/smoke.toml; or the word "
                                                  "`merge`, then the hunts' folders to merge (DIR...)")
    hunt.add_argument("folders", type=Path, nargs="*", metavar="DIR",
                      help="`hunt merge DIR...`: the folders of several hunts of one scenario, seed and strategy (each "
                           "a --trial-range of the same search), merged into one hunt.json, hunt.jsonl and hunt.html "
                           "in a new folder under --results")
    hunt.add_argument("--trials", type=int, help="the most trials the search runs ([hunt] trials, default 20)")
    hunt.add_argument("--controls", type=int, help="trials without chaos before the search ([hunt] controls, "
                                                   "default 2; 0: none)")
    hunt.add_argument("--expect", action=argparse.BooleanOptionalAction,
                      help="count the scenario's [expect] as part of the property ([hunt] expect, default false)")
    hunt.add_argument("--reuse", action=argparse.BooleanOptionalAction,
                      help="fork each trial's replicas from one zygote the hunt starts once, not one per trial "
                           "(--no-reuse: one per trial) ([hunt] reuse, default true)")
    hunt.add_argument("--budget", help="the most wall time the search takes, e.g. 15m ([hunt] budget, default 15m; "
                                       "the shrink has its own)")
    hunt.add_argument("--trial-duration", help="how long each trial's load runs, e.g. 10s ([hunt] trial_duration, "
                                               "default 10s)")
    hunt.add_argument("--strategy", metavar="NAME",
                      help="how the search draws each trial's schedule ([hunt] strategy, default random): random "
                           "(each step from every allowed action), swarm (each trial from a random subset of the "
                           "actions), cover (each step in the coverage cell drawn least so far: every cell once "
                           "before any twice), lineage (the smallest untried fault set that cuts every support of a "
                           "flow class the passing trials' journals show; stops with a certificate when none is left)")
    hunt.add_argument("--max-steps", type=int, help="the most chaos steps a schedule has ([hunt] max_steps, "
                                                    "default 2)")
    hunt.add_argument("--actions", help="the chaos actions drawn, comma-separated, e.g. restart,rotate-keys "
                                        "([hunt] actions; default: every one the target can take)")
    hunt.add_argument("--replicas", help="the replicas chaos may name, comma-separated, e.g. 1,2 ([hunt] replicas; "
                                         "default: all)")
    hunt.add_argument("--seed", type=int, help="the seed the schedules are drawn from ([hunt] seed; default: the "
                                               "scenario's)")
    hunt.add_argument("--reruns", type=int, help="runs of the found schedule's replay, and of each smaller schedule "
                                                 "while shrinking ([hunt] reruns, default 3)")
    hunt.add_argument("--must-fail", type=int, help="runs of those that must fail the same way (fewer in the replay: "
                                                    "flaky, not shrunk) ([hunt] must_fail, default 2)")
    hunt.add_argument("--shrink-budget", help="the most wall time the shrink takes, e.g. 10m ([hunt] shrink_budget, "
                                              "default 15m)")
    hunt.add_argument("--shrink-runs", type=int, help="the most runs the shrink makes in all ([hunt] shrink_runs, "
                                                      "default 60)")
    hunt.add_argument("--reproduce", type=int, help="runs of the minimal schedule for its reproduction rate "
                                                    "([hunt] reproduce, default 10; 0: not measured)")
    hunt.add_argument("--reproduce-at-least", type=float, metavar="SHARE",
                      help="the share of those runs the minimal schedule must fail; below it the hunt backs off to a "
                           "larger schedule of the shrink path that does ([hunt] reproduce_at_least, default 0.8)")
    hunt.add_argument("--corpus", type=Path, action="append", metavar="DIR",
                      help="a folder of minimal failing scenarios, replayed before the search (each *.toml in it, "
                           "e.g. scenarios/on-call); a new minimal scenario is kept in the first one named (made if "
                           "missing). Repeatable")
    hunt.add_argument("--from-triage", type=Path, metavar="FILE",
                      help="steer the hunt by an incident's logged reasons: FILE is `mrtr-harness triage --once "
                           "--json` output; the hunt draws only the actions that can provoke the reasons it "
                           "counted, and a trial whose replicas log one of them fails (the logged reasons reproduced)")
    hunt.add_argument("--trial-range", metavar="A:B",
                      help="run only the search trials A to B (1-based, inclusive, within --trials) of the search, "
                           "each drawn and seeded as the whole hunt would: one machine's share, e.g. a Kubernetes "
                           "Indexed Job's pod; `hunt merge` joins the shares (random, swarm and cover only: lineage "
                           "draws from what earlier trials showed)")
    hunt.add_argument("--shares", type=int, metavar="N",
                      help="run the search as N shares at once on this machine (each a --trial-range of it, in its "
                           "own process), stop the others at the first failure, then merge them into one hunt: a "
                           "trial mostly waits, so N trials at once finish nearly as fast as one (random, swarm and "
                           "cover only; not with --corpus)")
    hunt.add_argument("--results", type=Path, default=Path("results"),
                      help="folder under which <utc>-hunt-<scenario>/ is made (default results/)")
    add_allow_host(hunt)
    hunt.set_defaults(handler=run_hunt)


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given, as dotted `[hunt]` keys the scenario model validates with the file."""
    found: dict[str, Any] = {}
    for key in BOUND_FLAGS:
        if getattr(args, key) is not None:
            found[f"hunt.{key}"] = getattr(args, key)
    if args.actions is not None:
        found["hunt.actions"] = [name.strip() for name in args.actions.split(",") if name.strip()]
    if args.replicas is not None:
        found["hunt.replicas"] = [_whole(part, "--replicas") for part in args.replicas.split(",") if part.strip()]
    return found


def _whole(text: str, flag: str) -> int:
    from harness.errors import UsageError

    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{flag}: {text.strip()!r} is not a replica's number (1, 2, ...)") from None


def trial_range(text: str, trials: int, strategy: str, corpus: bool) -> tuple[int, int]:
    """`--trial-range A:B` as (A, B): whole numbers, 1 <= A <= B <= `trials`, with a strategy whose schedules do not
    depend on earlier trials' outcomes and no corpus (replayed once, not by every share); else UsageError (exit 2)."""
    from harness.errors import UsageError

    first, colon, last = text.partition(":")
    if not colon or not first.strip().isdigit() or not last.strip().isdigit():
        raise UsageError(f"--trial-range: {text!r} is not A:B (two whole numbers, e.g. 1:10)")
    bounds = (int(first), int(last))
    if not 1 <= bounds[0] <= bounds[1] <= trials:
        raise UsageError(f"--trial-range {text}: want 1 <= A <= B <= {trials} (the search's trials, --trials)")
    if strategy == "lineage":
        raise UsageError("--trial-range: the lineage strategy draws each trial from what the earlier trials showed, "
                         "so a share cannot draw its trials alone; use random, swarm or cover")
    if corpus:
        raise UsageError("--trial-range: --corpus is replayed before the search, once; run it in one hunt, not in "
                         "every share")
    return bounds


def run_hunt(args: argparse.Namespace) -> int:
    if args.scenario == Path("merge"):
        return _merge(args)
    if args.folders:
        from harness.errors import UsageError

        raise UsageError(f"hunt takes one scenario, not {len(args.folders) + 1} arguments (to merge hunts' folders: "
                         "`hunt merge DIR...`)")
    import locust  # noqa: F401 - its import patches gevent, which must come before any socket or thread

    from harness.config.remote import say_remote
    from harness.hunt.model import unshrunk_reason
    from harness.hunt.search import EXIT_CODES, NOTHING_TO_DRAW, Hunt
    from harness.hunt.trial import Base

    steering = None
    if args.from_triage is not None:
        base, steering = _steered(args)
    else:
        base = Base.read(args.scenario, overrides(args))  # ScenarioError (the [hunt] bounds too): exit 2
    if base.scenario.hunt is None:
        from harness.config.hunt import HuntSettings

        base = Base(base.data, base.scenario.model_copy(update={"hunt": HuntSettings()}), base.source,
                    base.text)
    hunt = Hunt(base, results_root=args.results, stream=sys.stderr, corpus_folders=args.corpus or ())
    hunt.steering = steering
    if args.shares is not None:
        from harness.hunt.shares import check_shares

        check_shares(args.shares, hunt.settings.trials, hunt.settings.strategy, bool(args.corpus), args.trial_range)
    if args.trial_range is not None:
        hunt.trial_range = trial_range(args.trial_range, hunt.settings.trials, hunt.settings.strategy,
                                       bool(args.corpus))
    say_remote(hunt.first_scenario(), args.allow_host, str(args.scenario))  # chaos off this machine: exit 2
    if base.scenario.target.auth is not None:
        from harness.auth.token_sources import check

        check(base.scenario.target)  # a secret's variable unset (not embedded), a token file with no token: exit 2
    if args.shares is not None:
        from harness.hunt.shares import run_shares

        return run_shares(args, hunt.settings.trials, base.scenario.name)
    result = hunt.run()
    folder = hunt.folder
    assert folder is not None
    code = EXIT_CODES[result.stopped_by]
    if result.control is not None:
        print(f"fails without chaos: control trial {result.control.index} failed "
              f"({', '.join(map(str, result.control.failures))}) with no chaos at all; nothing was searched: "
              f"{folder / result.control.folder / 'scenario.toml'}")
    elif result.found is not None:
        print(f"found: trial {result.found.index} failed ({', '.join(map(str, result.found.failures))}): "
              f"{folder / result.found.folder / 'scenario.toml'}")
        if result.shrink_stopped_by == "flaky" and result.replay is not None:
            print(f"flaky: reproduced {result.replay[0]} of {result.replay[1]} (replays of trial "
                  f"{result.found.index}'s schedule, fresh seeds): not shrunk")
        _say_flaky(result)
        if hunt.minimal_file is not None:
            how = _cut_short(result.shrink_stopped_by) if result.shrunk else \
                f"; {unshrunk_reason(result.shrink_stopped_by)}"
            print(f"{'minimal' if result.shrunk else 'not shrunk'}: {hunt.minimal_file} "
                  f"({_rate(result.reproduction)}{how})")
    elif code == 0:
        searched = sum(trial.purpose == "search" for trial in result.trials)
        controls = sum(trial.purpose == "control" for trial in result.trials)
        print(f"nothing broke in {searched} trials after {controls} without chaos (stopped by {result.stopped_by}); "
              f"{hunt.coverage_line()}")
    elif result.stopped_by == NOTHING_TO_DRAW and steering is not None:
        print(steering.nothing_to_draw(hunt.controls_held()))
    else:
        print(f"hunt stopped ({result.stopped_by}) after {len(result.trials)} trials; {hunt.coverage_line()}")
    _say_strength(result)
    _say_corpus(hunt)
    if hunt.page_file is not None:
        print(f"page: {hunt.page_file}")
    print(f"journal: {folder / 'hunt.jsonl'}")
    if hunt.summary_file is not None:
        print(f"summary: {hunt.summary_file}")
    return code


def _merge(args: argparse.Namespace) -> int:
    """`hunt merge DIR...`: several hunts' folders as one hunt (`harness.hunt.merge`); exit 1 when a trial failed in
    any, 0 when none did; folders that are not shares of one search: exit 2, nothing written."""
    from harness.hunt.merge import merge_hunts

    if len(args.folders) < 1:
        from harness.errors import UsageError

        raise UsageError("hunt merge: name the hunts' folders to merge (hunt merge DIR...)")
    merged = merge_hunts(args.folders, args.results)
    for line in merged.lines():
        print(line)
    return merged.exit_code


def _steered(args: argparse.Namespace) -> tuple[Base, Steering]:
    """The scenario steered by `--from-triage`: its actions narrowed to those provoking the reasons triage counted,
    its property gaining those reasons; its text rewritten to match, so minimal.toml's `[reproduces]` and `[expect]`
    name them. A file that cannot steer (unreadable, no rejection counted, no drawable action provokes a counted
    reason): UsageError, exit 2, nothing started."""
    from dataclasses import replace

    from harness.config.hunt import HuntSettings, drawable_actions
    from harness.errors import UsageError
    from harness.hunt.from_triage import read_triage, steer, steered_overrides
    from harness.hunt.toml_file import document
    from harness.hunt.trial import Base

    triaged = read_triage(args.from_triage)
    given = overrides(args)
    base = Base.read(args.scenario, given)
    steering = steer(triaged, drawable_actions(base.scenario), str(args.from_triage))
    if steering.controls_only and not (base.scenario.hunt or HuntSettings()).controls:
        raise UsageError(f"{steering.nothing_to_draw()}; and with no control trial nothing would show the deployment "
                         "logging them without chaos")
    counted = (base.scenario.hunt or HuntSettings()).expect
    base = Base.read(args.scenario, steered_overrides(steering, given, base.scenario.expect if counted else None))
    return replace(base, text=document(base.data)), steering


def _say_flaky(result: HuntResult) -> None:
    """Each find set aside as flaky while the search went on, a line each (the page says them too)."""
    from harness.hunt.page import flaky_lines

    for line in flaky_lines(result):
        print(line)


def _say_strength(result: HuntResult) -> None:
    """The residual risk of "nothing broke" and the health checks that weaken it, a line each (the page says them
    too)."""
    from harness.hunt.page import strength_lines

    for line in strength_lines(result):
        print(line)


def _say_corpus(hunt: Hunt) -> None:
    """Which corpus entry failed again, and where the minimal scenario was kept (new, or already there)."""
    if hunt.found_in_corpus is not None:
        print(f"found by replaying the corpus entry {hunt.found_in_corpus}: a failure seen before")
    if hunt.corpus_saved is not None:
        path, new = hunt.corpus_saved
        print(f"corpus: {'kept as a new entry' if new else 'already kept'}: {path}")


def _rate(reproduction: tuple[int, int] | None) -> str:
    if reproduction is None:
        return "reproduction rate not measured"
    return f"reproduced in {reproduction[0]} of {reproduction[1]} runs"


def _cut_short(stopped_by: str) -> str:
    """How the shrink ended, when not at a 1-minimal schedule."""
    if stopped_by in ("runs", "time"):
        return f"; the shrink's budget of {stopped_by} ran out first: maybe not minimal"
    if stopped_by == "rounds":
        return "; the shrink's rounds ran out while it still made progress: maybe not minimal"
    if stopped_by == "flaky":
        return "; flaky: the found schedule, not shrunk"
    return f"; the shrink was cut short ({stopped_by}): not minimal" if stopped_by not in ("", "done") else ""
