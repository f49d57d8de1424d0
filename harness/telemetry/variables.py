"""OpenTelemetry's variables as a child process or a container is given them, so what it exports follows the run.

A process the harness starts by itself inherits its environment; a replica forked by the zygote, or run in a
container, does not: each is handed these variables explicitly. Every `OTEL_*` variable goes, headers included
(a backend's API key in `OTEL_EXPORTER_OTLP_HEADERS` is what lets a replica export at all): handed over in
memory, never written to a file, a log or a results folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

PREFIX: Final = "OTEL_"


def otel_variables(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every `OTEL_*` variable of `environ` (default: this process's), for a child that does not inherit them."""
    env = os.environ if environ is None else environ
    return {name: value for name, value in env.items() if name.startswith(PREFIX)}
