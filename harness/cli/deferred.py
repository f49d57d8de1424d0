"""An argument parser whose arguments are added only when that subcommand is used.

A subcommand whose options are defined by the code it runs (the shop's replica and
authorization server define theirs beside their servers) would load that code with the
whole command line. A `DeferredParser` is given the function that adds them, and calls it
the first time it parses arguments or writes its help, so `mrtr-harness --help`, `validate`,
`report` and `compare` never load it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["DeferredParser"]


class DeferredParser(argparse.ArgumentParser):
    """An `ArgumentParser` that calls `fill(self)` once, before it first parses or writes its usage or help."""

    def __init__(self, *args: Any, fill: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fill = fill

    def _filled(self) -> None:
        fill, self._fill = self._fill, None
        if fill is not None:
            fill(self)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._filled()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._filled()
        return super().format_usage()

    def format_help(self) -> str:
        self._filled()
        return super().format_help()
