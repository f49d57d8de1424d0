"""The `mrtr-harness` command line: one entry point, a subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import harness
from harness.shop import cli as shop_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mrtr-harness",
        description="Load and chaos testing for MCP servers that ask the user mid-call "
                    "(Multi Round-Trip Requests, MCP 2026-07-28).",
    )
    parser.add_argument("--version", action="version", version=f"mrtr-harness {harness.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    shop_cli.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
