"""How one run is run, beside its scenario: where results go, the workers, the endpoints it serves."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from harness.config.thresholds import Judged


@dataclass
class RunOptions:
    results_root: Path = Path("results")
    progress: bool = True
    workers: int = 0  # Locust workers this run starts on this machine
    remote_workers: int = 0  # Locust workers started elsewhere (`mrtr-harness worker --master-host ...`)
    master_bind_host: str = "127.0.0.1"
    master_bind_port: int | None = None
    workers_wait: float = 60.0  # how long the master waits for every worker to be ready
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_linger: float = 0.0
    web: tuple[str, int] | None = None  # serve Locust's web UI, with the MRTR tab, here
    web_linger: float = 0.0
    web_password: str | None = None  # the page's password, off loopback (`MRTR_WEB_PASSWORD`); None: loopback only
    save_figures_every: float = 60.0  # seconds between saves of the live figures (by the fold process)
    prometheus_targets: Path | None = None
    judged: Judged = Judged.EXPECT  # [expect], or [reproduces] with `run --reproduce`
    stream: IO[str] = field(default_factory=lambda: sys.stderr)
