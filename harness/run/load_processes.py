"""Where a run's load comes from, as the command line says: this process, N local workers, or workers elsewhere.

`run` and `capacity` take the same options (`--workers N`, or `--master` with
`--expect-workers N` and its bind address), read here into the `RunOptions` fields that
`harness.run.load` spreads the load by: one code path for a run and for each step of a sweep.
"""

from __future__ import annotations

import argparse
from typing import Any

from harness.config.durations import parse_duration_option
from harness.errors import UsageError
from harness.load import DEFAULT_MASTER_PORT
from harness.load.handshake import cluster_secret


def add_options(parser: argparse.ArgumentParser, load: str = "the load") -> argparse._ArgumentGroup:
    """`--workers` on `parser`, and the master's options in a group (returned: `run` adds its worker's own)."""
    parser.add_argument("--workers", type=int, default=0,
                        help=f"drive {load} from N local Locust worker processes (Locust's own master and "
                             "workers); default: in this process")
    spread = parser.add_argument_group("workers on other machines (Locust's own flags)")
    spread.add_argument("--master", action="store_true",
                        help=f"be the master of workers started elsewhere with `mrtr-harness worker` "
                             f"(or `run --worker`), which drive {load}; needs --expect-workers, and "
                             "MRTR_CLUSTER_SECRET set to the workers' value (each side proves it holds it before "
                             "the scenario is sent: docs/running.md)")
    spread.add_argument("--expect-workers", type=int, default=0,
                        help="with --master: how many workers to wait for before the load starts")
    spread.add_argument("--expect-workers-max-wait", default="5m",
                        help="with --master: give up (exit 3) if they are not all ready by then (default 5m)")
    spread.add_argument("--master-bind-host", default="127.0.0.1",
                        help="with --master: the address workers connect to (default 127.0.0.1; 0.0.0.0 for "
                             "workers on other machines)")
    spread.add_argument("--master-bind-port", type=int, default=DEFAULT_MASTER_PORT,
                        help=f"with --master: the port workers connect to (default {DEFAULT_MASTER_PORT})")
    return spread


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The `RunOptions` fields the options give; UsageError (exit 2) when they do not go together."""
    if args.workers < 0 or args.expect_workers < 0:
        raise UsageError("--workers and --expect-workers must be 0 or more")
    if args.master != (args.expect_workers > 0):
        raise UsageError("--master and --expect-workers N go together")
    if args.master:
        cluster_secret(throwaway=False)  # workers elsewhere hold the one they were given: MissingSecret, exit 2
    wait = parse_duration_option("--expect-workers-max-wait", args.expect_workers_max_wait)
    return {"workers": args.workers, "remote_workers": args.expect_workers,
            "master_bind_host": args.master_bind_host,
            "master_bind_port": args.master_bind_port if args.master else None,
            "workers_wait": wait if args.master else 60.0}
