"""A shop replica's CPU per round with OAuth on against the same replica code with it off, in one run.

The question: what does being a resource server (the SDK's bearer middleware, the JWT
check against the authorization server's JWKS, the scope gate, the revocation feed polled
every second) cost a replica per round? One local deployment with the shop's
authorization server and two replicas from the same command: r1 verifies tokens, r2 is
started without auth (`ReplicaOptions(auth=False)`), sharing the API and the store. Whole
flows (quote, issue round 1, issue round 2 on held orders: three POSTs) are sent to one
replica at a time in windows of a fixed count, in ABBA order (on, off, off, on, repeated),
so a drift in what the rest of the machine does falls on both sides alike. Each thread is
one lead holding its own token (fetched once, as a lead holds one until it is refreshed).

Per window: the replica's utime+stime from /proc before and after, per POST; the ratio
on/off is taken over the sums of each side's windows. The authorization server's own CPU
over the whole run is reported too (it serves the replicas' polls and the token requests), and
so is the CPU of one `verify_token` in this process, for a token seen first and seen again.
Raw figures go to `results/benchmarks/shop_auth_cpu-<utc>.json`.

Run from the repository root:

    python benchmarks/shop_auth_cpu.py [--flows 300] [--passes 3] [--threads 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `python benchmarks/shop_auth_cpu.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.cpu import machine_facts, machine_seconds, process_cpu_seconds
from benchmarks.runs import write_figures
from benchmarks.shop_replica import PHASE_CAP, Shop, flow_work, run_pool
from harness.shop.orders import build_orders
from harness.targets.auth_admin import AuthServerSpec
from harness.targets.local_deployment import LocalDeployment, ReplicaOptions

SECRET_ENV = "MRTR_BENCH_CLIENT_SECRET"
CLIENT_ID = "support-leads"
POSTS_PER_FLOW = 3


def lead_tokens(issuer: str, secret: str, leads: int) -> list[str]:
    """One token per lead, from the deployment's own token endpoint (client_secret_basic)."""
    tokens = []
    for lead in range(leads):
        response = httpx.post(f"{issuer}/token", auth=(CLIENT_ID, secret),
                              data={"grant_type": "client_credentials", "scope": "refunds:write", "lead": str(lead)})
        response.raise_for_status()
        tokens.append(response.json()["access_token"])
    return tokens


def verification_cost(tokens: int = 2000, repeats: int = 5) -> dict[str, float]:
    """CPU per `JwtVerifier.verify_token` in this process: a token seen for the first time (the ES256 check), and
    one seen before (the remembered claims), with keys given directly and no feed polling."""
    import asyncio
    import secrets

    import jwt

    from harness.shop.authserver import Signer
    from harness.shop.token_checks import JwtVerifier

    signer = Signer()
    now = time.time()
    fresh = [signer.sign({"iss": "http://issuer", "sub": f"{CLIENT_ID}/lead-{n}", "aud": "mcp-shop",
                          "client_id": CLIENT_ID, "scope": "refunds:write", "iat": now, "exp": now + 3600,
                          "jti": secrets.token_hex(12)}) for n in range(tokens)]
    verifier = JwtVerifier("http://issuer", "mcp-shop")
    verifier.keys = {signer.kid: jwt.PyJWK(signer.jwks["keys"][0])}
    verifier._poller = asyncio.Future  # not None: measured without the feed's polling

    async def cost(batch: list[str]) -> float:
        started = time.process_time()
        for token in batch:
            if await verifier.verify_token(token) is None:
                raise SystemExit("a freshly signed token was refused")
        return (time.process_time() - started) / len(batch) * 1e6

    first = asyncio.run(cost(fresh))
    again = asyncio.run(cost(fresh * repeats))
    return {"first_us": round(first, 1), "remembered_us": round(again, 1)}


def window(shop: Shop, flows: int, start: int) -> dict[str, Any]:
    """`flows` whole flows on one replica; its CPU per POST, and how the rest of the machine was."""
    before = process_cpu_seconds(shop.replica_pid), machine_seconds()[0], time.monotonic()
    run = run_pool(shop.clients, _offset(flow_work(shop), start), count=flows, seconds=PHASE_CAP)
    cpu = process_cpu_seconds(shop.replica_pid) - before[0]
    wall = time.monotonic() - before[2]
    if run.failures or run.done == 0:
        raise SystemExit(f"{shop.url}: {run.failures} flows failed ({run.first_failure})")
    return {"flows": run.done, "replica_cpu_s": round(cpu, 4), "wall_s": round(wall, 3),
            "replica_cpu_us_per_post": round(cpu / (run.done * POSTS_PER_FLOW) * 1e6, 1),
            "machine_cores": round((machine_seconds()[0] - before[1]) / wall, 2)}


def _offset(work: Any, start: int) -> Any:
    """The work with its unit indexes moved past those used before (each flow its own order and ids)."""
    return lambda client, index, record: work(client, start + index, record)


def shop_for(deployment: LocalDeployment, index: int, held: list[str], headers: list[dict[str, str]]) -> Shop:
    """Replica `index` driven by one keep-alive client per thread, each with its own headers (its lead's token)."""
    replica = deployment.replicas[index]
    assert deployment.api is not None and replica.pid is not None and deployment.api.pid is not None
    clients = [httpx.Client(timeout=10.0, headers=each) for each in headers]
    return Shop(url=deployment.replica_urls[index], healthz=f"{replica.base_url}/healthz", replica_pid=replica.pid,
                api_pid=deployment.api.pid, held_orders=held, clients=clients)


def run(args: argparse.Namespace) -> dict[str, Any]:
    secret = os.urandom(16).hex()
    os.environ[SECRET_ENV] = secret
    held = build_orders().order_ids(needs_confirmation=True)
    with tempfile.TemporaryDirectory(prefix="shop-auth-cpu-") as folder:
        deployment = LocalDeployment(Path(folder), replicas=2, auth=AuthServerSpec(CLIENT_ID, SECRET_ENV))
        deployment.start([ReplicaOptions(), ReplicaOptions(auth=False)])
        try:
            assert deployment.auth is not None and deployment.auth.process.pid is not None
            tokens = lead_tokens(deployment.auth.issuer, secret, args.threads)
            on = shop_for(deployment, 0, held, [{"Authorization": f"Bearer {token}"} for token in tokens])
            off = shop_for(deployment, 1, held, [{} for _ in tokens])
            auth_before = process_cpu_seconds(deployment.auth.process.pid)
            started = 0
            for shop in (on, off):  # warm both: first requests pay imports and caches
                window(shop, args.warmup, started)
                started += args.warmup
            windows: list[dict[str, Any]] = []
            for number in range(args.passes):
                for side, shop in (("on", on), ("off", off), ("off", off), ("on", on)):
                    windows.append({"pass": number + 1, "auth": side, **window(shop, args.flows, started)})
                    started += args.flows
            auth_cpu = process_cpu_seconds(deployment.auth.process.pid) - auth_before
        finally:
            deployment.stop()
    sums = {side: sum(w["replica_cpu_s"] for w in windows if w["auth"] == side) for side in ("on", "off")}
    posts = {side: sum(w["flows"] for w in windows if w["auth"] == side) * POSTS_PER_FLOW for side in ("on", "off")}
    return {"benchmark": "shop_auth_cpu", "machine": machine_facts(), "threads": args.threads, "windows": windows,
            "replica_cpu_us_per_post": {side: round(sums[side] / posts[side] * 1e6, 1) for side in sums},
            "ratio_on_off": round((sums["on"] / posts["on"]) / (sums["off"] / posts["off"]), 3),
            "authorization_server_cpu_s": round(auth_cpu, 3), "verify_token_cpu_us": verification_cost()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=300, help="flows per window (default 300)")
    parser.add_argument("--passes", type=int, default=3, help="ABBA passes (default 3: 12 windows)")
    parser.add_argument("--threads", type=int, default=4, help="client threads, one lead each (default 4)")
    parser.add_argument("--warmup", type=int, default=50, help="flows on each replica before measuring")
    args = parser.parse_args(argv)
    if min(args.flows, args.passes, args.threads) < 1 or args.warmup < 0:
        parser.error("--flows, --passes and --threads must be at least 1, --warmup at least 0")
    started = datetime.now(UTC)
    figures = run(args)
    path = write_figures("shop_auth_cpu", figures, started)
    for w in figures["windows"]:
        print(f"pass {w['pass']} auth {w['auth']:<3} {w['flows']} flows  {w['replica_cpu_us_per_post']:>8} us/POST  "
              f"machine {w['machine_cores']} cores")
    print(f"replica CPU per POST: on {figures['replica_cpu_us_per_post']['on']} us, off "
          f"{figures['replica_cpu_us_per_post']['off']} us, ratio {figures['ratio_on_off']}; authorization server "
          f"{figures['authorization_server_cpu_s']} s CPU in all; verify_token "
          f"{figures['verify_token_cpu_us']['first_us']} us first, {figures['verify_token_cpu_us']['remembered_us']} "
          f"us after; raw: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
