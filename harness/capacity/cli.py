"""`mrtr-harness capacity SCENARIO`: sweep arrival rates and replica counts, then table, plots and recommendation.

    mrtr-harness capacity scenarios/capacity.toml --replicas 1,2 --rates 2,4,8
    mrtr-harness capacity scenarios/capacity.toml --replicas 1-3 --search 4:128 --step 30s --peak 20
    mrtr-harness capacity scenarios/capacity.toml --replicas 1-4 --rates 25,50,100 --workers 4

Exit codes: 0 the sweep completed (whatever capacity it found); 2 a bad scenario or
options; 3 a step's target could not be started or reached; 130 interrupted.
Imports stay inside the handler: Locust must patch gevent before anything else loads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.config.remote import add_allow_host
from harness.errors import ExitCode
from harness.exit_codes import epilog
from harness.run import load_processes


def add_parser(commands: argparse._SubParsersAction) -> None:
    capacity = commands.add_parser(
        "capacity", help="sweep arrival rates and replica counts: the highest rate that holds the SLO",
        description="Run the scenario step by step (an arrival rate on a replica count, each held long enough "
                    "for a steady state), judge each step by the scenario's [expect] thresholds over its steady "
                    "window, and write capacity.json, capacity.html and plots: the highest rate holding the SLO "
                    "per replica count, and think time against TTL.",
        epilog=epilog("capacity"))
    capacity.add_argument("scenario", type=Path, help="scenario file (TOML, open model), e.g. scenarios/capacity.toml")
    rates = capacity.add_mutually_exclusive_group()
    rates.add_argument("--rates", help="arrival rates to step through, flows/s, e.g. 2,4,8,16 (stops after the "
                                       "first break)")
    rates.add_argument("--search", metavar="START:MAX[:FACTOR]",
                       help="multiply the rate by FACTOR (default 2) from START until the SLO breaks or MAX holds, "
                            "then bisect (default: from the scenario's rate to 16 times it)")
    capacity.add_argument("--refine", type=int, default=2, help="bisection steps after a search's first break "
                                                                "(default 2)")
    capacity.add_argument("--replicas", help="replica counts, e.g. 1,2 or 1-4: on an embedded target, or through "
                                             "[target.commands] scale on an external or docker one "
                                             "(default: the scenario's)")
    capacity.add_argument("--every-rate", action="store_true",
                          help="run every rate on every replica count (default: a count after the first starts "
                               "at the highest rate the previous one held)")
    capacity.add_argument("--step", default="20s", help="how long each step's load runs (default 20s)")
    capacity.add_argument("--warmup", help="discarded at the start of each step (default: the scenario's ramp "
                                           "or a quarter step, whichever is longer)")
    capacity.add_argument("--peak", type=float, help="the planned peak arrival rate, flows/s: the report says how "
                                                     "many replicas hold it with headroom")
    capacity.add_argument("--headroom", type=float, default=0.25,
                          help="margin above the peak a replica count must hold (default 0.25 = 25%%)")
    capacity.add_argument("--expiry-target", type=float, default=0.01,
                          help="share of request states allowed to expire (default 0.01): the report gives the "
                               "TTL that meets it")
    capacity.add_argument("--saturation-cpu", type=float, default=0.8,
                          help="harness CPU (cores) over a step above which the step is flagged as the load "
                               "generator saturating, never as the server's limit (default 0.8; with workers, the "
                               "master's CPU: a worker that cannot keep up shows as flows started late)")
    capacity.add_argument("--seed", type=int, help="override the scenario's seed")
    capacity.add_argument("--results", type=Path, default=Path("results"),
                          help="folder under which <utc>-capacity-<scenario>/ is made (default results/)")
    capacity.add_argument("--quiet", action="store_true",
                          help="no line per step (the estimated duration is still printed before the first)")
    add_allow_host(capacity)
    load_processes.add_options(capacity, "each step's load")
    capacity.set_defaults(handler=run_capacity)


def _plan(args: argparse.Namespace, workers: int = 0, remote_workers: int = 0):
    from pydantic import ValidationError

    from harness.capacity.sweep_plan import (
        CapacityPlan,
        PlanError,
        RateSearch,
        parse_rates,
        parse_replicas,
        parse_search,
    )

    fields = {"step": args.step, "peak": args.peak, "headroom": args.headroom, "expiry_target": args.expiry_target,
              "saturation_cpu": args.saturation_cpu, "from_previous": not args.every_rate,
              "workers": workers, "remote_workers": remote_workers}
    if args.warmup is not None:
        fields["warmup"] = args.warmup
    try:
        if args.rates is not None:
            fields["rates"] = parse_rates(args.rates)
        if args.search is not None:
            start, high, factor = parse_search(args.search)
            try:
                fields["search"] = RateSearch(start=start, max=high, refine=args.refine,
                                              **({"factor": factor} if factor is not None else {}))
            except ValidationError as exc:
                error = exc.errors()[0]
                name = "--refine" if error["loc"] == ("refine",) else "--search"
                field = f"{error['loc'][0]}: " if error["loc"] and name == "--search" else ""
                raise PlanError(f"{name}: {field}{error['msg'].removeprefix('Value error, ')}") from None
        if args.rates is None and args.search is None:
            fields["refine"] = args.refine  # for the search the sweep makes from the scenario's rate
        if args.replicas is not None:
            fields["replicas"] = parse_replicas(args.replicas)
        return CapacityPlan(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        raise PlanError(f"--{where.replace('_', '-')}: {message}" if where else message) from None


def run_capacity(args: argparse.Namespace) -> int:
    import locust  # noqa: F401 - its import patches gevent, which must come before any socket or thread

    from harness.capacity.report import render_text, write_report
    from harness.capacity.sweep import Sweep
    from harness.config.remote import say_remote
    from harness.config.scenario import load_scenario

    overrides = {"seed": args.seed} if args.seed is not None else {}
    master = load_processes.options(args)  # UsageError: exit 2, before anything starts
    plan = _plan(args, master.pop("workers"), master.pop("remote_workers"))  # PlanError: exit 2
    scenario = load_scenario(args.scenario, overrides)
    say_remote(scenario, args.allow_host, str(args.scenario))  # chaos, fuzzing, secrets off this machine: exit 2
    if scenario.target.auth is not None:
        from harness.auth.token_sources import check

        check(scenario.target)  # a secret's variable unset (not embedded), a token file with no token: exit 2
    sweep = Sweep(scenario, args.scenario.read_text(encoding="utf-8"), plan, source=str(args.scenario),
                  overrides=overrides, results_root=args.results, master=master,
                  stream=sys.stderr, quiet=args.quiet)
    sweep.check()
    result = sweep.run()
    paths = write_report(result)
    print(render_text(result))
    print(f"report: {paths['html']}")
    return {"completed": ExitCode.PASSED, "target-error": ExitCode.TARGET}.get(result.status, ExitCode.INTERRUPTED)
