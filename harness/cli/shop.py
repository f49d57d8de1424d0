"""`mrtr-harness shop ...`: run the reference deployment's parts by hand or from a backend.

The harness's side of the shop: the shop (`harness.shop`) is the server only and knows
nothing of the harness's command line; `shop up` runs the process backend's deployment
(`harness.targets.local_deployment`), tied to this process so it dies with it. The shop's
code is imported only by the subcommand that runs it (`harness.cli.deferred` for the options
the replica and the authorization server define), so the rest of the command line never
loads a server.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.deferred import DeferredParser
from harness.errors import ExitCode
from harness.exit_codes import epilog

if TYPE_CHECKING:
    from harness.targets.local_deployment import LocalDeployment


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    shop = subparsers.add_parser("shop", help="run the reference MRTR deployment (the shop)",
                                 description="Run the reference MRTR deployment: the shop's API and MCP replicas.",
                                 epilog=epilog("shop"))
    commands = shop.add_subparsers(dest="shop_command", required=True, metavar="{api,replica,auth-server,keyring,up}",
                                   parser_class=DeferredParser)

    api = commands.add_parser("api", help="run the shop's HTTP API (the ledger)")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, required=True)
    api.add_argument("--store", default="sqlite:results/shop/shop.db",
                     help="sqlite:PATH (default), redis://HOST:PORT[/DB] or memory")
    api.add_argument("--seed", type=int, default=None, help="catalogue seed (default 2026)")
    api.add_argument("--orders", type=int, default=None, help="how many orders the shop holds (default 5000)")
    api.add_argument("--no-release-guard", dest="release_guard", action="store_false",
                     help="release a refund again when asked (no 409): only the replicas' once-only record then "
                          "stops a replayed answer, which is what the on-call case of a missing record shows")
    api.set_defaults(handler=run_api)

    one = commands.add_parser("replica", help="run one MCP replica (the command every backend uses)",
                              fill=_replica_options)
    one.set_defaults(handler=lambda args: run_replica(one, args))

    auth = commands.add_parser("auth-server", help="run the shop's OAuth authorization server (client credentials)",
                               formatter_class=argparse.RawDescriptionHelpFormatter, fill=_auth_server_options)
    auth.set_defaults(handler=lambda args: run_auth_server(auth, args))

    keys = commands.add_parser("keyring", help="write a fresh key ring file, unless one is there already",
                               description="Write a key ring file with one new key (0600), for replicas started "
                                           "with --keyring file:PATH. An existing ring is left as it is.")
    keys.add_argument("path", type=Path, help="ring file to create")
    keys.add_argument("--force", action="store_true", help="replace an existing ring")
    keys.set_defaults(handler=run_keyring)

    up = commands.add_parser("up", help="run a whole local deployment until Ctrl-C")
    up.add_argument("--replicas", type=int, default=3, help="number of MCP replicas (default 3)")
    up.add_argument("--store", default=None, help="shared records (default: sqlite in the work folder)")
    up.add_argument("--ttl", default="10m", help="requestState lifetime (default 10m)")
    up.add_argument("--name", default="shop", help="server name, the states' audience (default shop)")
    up.add_argument("--workdir", type=Path, default=None,
                    help="folder for the ring file, the sqlite file and the logs (default: a new temp folder)")
    up.add_argument("--seed", type=int, default=None, help="catalogue seed")
    up.set_defaults(handler=lambda args: run_up(up, args))


def _replica_options(parser: argparse.ArgumentParser) -> None:
    from harness.shop import replica

    parser.description = replica.__doc__
    replica.add_arguments(parser)


def _auth_server_options(parser: argparse.ArgumentParser) -> None:
    from harness.shop import authserver

    parser.description = authserver.__doc__
    authserver.add_arguments(parser)


def run_api(args: argparse.Namespace) -> int:
    import uvicorn

    from harness.shop import replica
    from harness.shop.api import create_app
    from harness.shop.orders import DEFAULT_ORDER_COUNT, DEFAULT_SEED, build_orders
    from harness.shop.store import StoreSpecError, StoreUnavailable, open_store

    replica.configure_logging("api")
    try:
        store = open_store(args.store)
    except (StoreSpecError, StoreUnavailable) as exc:
        print(f"mrtr-harness shop api: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    orders = build_orders(args.seed if args.seed is not None else DEFAULT_SEED,
                          args.orders if args.orders is not None else DEFAULT_ORDER_COUNT)
    app = replica.closing_at_shutdown(create_app(store, orders, release_guard=args.release_guard), store.close)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_config=None, access_log=False, lifespan="on")
    uvicorn.Server(config).run()
    return 0


def run_replica(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from harness.shop import replica
    from harness.shop.server import build_replica_server

    return replica.serve(replica.settings_from(parser, args), build_replica_server)


def run_auth_server(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from harness.shop import authserver

    return authserver.serve(authserver.policy_from(parser, args), args.host, args.port, args.admin_port)


def run_keyring(args: argparse.Namespace) -> int:
    from harness.mrtr.keys import fingerprint, new_key, read_ring, write_ring

    if args.path.exists() and not args.force:
        ring = read_ring(args.path)
        print(f"{args.path}: ring already there, sealing key {fingerprint(ring[0])}")
        return 0
    key = new_key()
    write_ring(args.path, [key])
    print(f"{args.path}: new ring, sealing key {fingerprint(key)}")
    return 0


def run_up(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from harness.targets.local_deployment import DeploymentError, LocalDeployment

    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mrtr-shop-"))
    deployment = LocalDeployment(workdir, replicas=args.replicas, store=args.store, ttl=args.ttl, name=args.name,
                                 seed=args.seed)
    try:
        deployment.start()
    except DeploymentError as exc:
        deployment.stop()
        print(f"mrtr-harness shop up: {exc}", file=sys.stderr)
        return ExitCode.TARGET
    _print_urls(deployment)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    try:
        while not stop and all(process.running() for process in [deployment.api, *deployment.replicas] if process):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        deployment.stop()
    print("stopped every process of the deployment")
    return 0


def _print_urls(deployment: LocalDeployment) -> None:
    from harness.mrtr.keys import fingerprint

    assert deployment.api is not None, "started"
    print(f"shop API      {deployment.api.base_url}   (ledger: {deployment.api.base_url}/ledger)")
    for process, url in zip(deployment.replicas, deployment.replica_urls, strict=True):
        print(f"replica {process.label:<5} {url}   (metrics: {process.base_url}/metrics)")
    ring = deployment.ring() if deployment.keyring.startswith("file:") else []
    print(f"key ring      {deployment.ring_path}  sealing key {fingerprint(ring[0]) if ring else '-'}")
    print(f"store         {deployment.store}")
    print(f"logs          {deployment.workdir / 'logs'}")
    print("Ctrl-C stops everything.", flush=True)
