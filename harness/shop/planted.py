"""Planted latent faults: bugs a replica can be started with, off by default, for measuring the hunt's search power.

Each planted fault is a replica that holds with no chaos at all and breaks only after a specific
chaos schedule: then it rejects, as `unknown key`, every state it did not mint since the fault
took hold (a replica that forgot the keys it held), which the hunt's property (`[expect]`
`rejections{reason='unknown key'} == 0`) counts. They are named in the environment variable
`MRTR_SHOP_PLANTED` (comma-separated), never in a scenario: no shipped scenario can turn one on.
A replica finds out what happened to it through a small record per replica beside its key ring
(`planted-rN.json` in the ring file's folder, which is the trial's own): each of its lives and
whether that life ended cleanly (a restart) or not (a kill), and the longest pause it noticed
(a heartbeat thread sees the gap a SIGSTOP leaves).

- `pause-amnesia-r1`: r1, once paused for at least 3.6 s (one long pause of r1);
- `kill-twice-r3`: r3, in a life after two kills of it;
- `restart-then-kill-r2`: r2, in a life after a restart of it and then a kill of it;
- `kill-r1-with-pause-r2`: r1, in a life after a kill of it, once r2 has been paused for at
  least 1.9 s (two faults, on two replicas, together);
- `pause-then-kill-r2`: r2, in a life after a kill of it that came once a pause of it for at least
  1.9 s had ended (a freeze, then a life's end, in that order: planted after lineage's probes were
  written, to measure them on a schedule they were not shaped for).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PLANTED", "PLANTED_ENV", "PlantedGuard", "planted_guard", "planted_names"]

logger = logging.getLogger("harness.shop.planted")

PLANTED_ENV = "MRTR_SHOP_PLANTED"
"""The environment variable naming the planted faults a replica starts with (unset: none)."""

LONG_PAUSE = 3.6
"""`pause-amnesia-r1`: the gap (s) r1 must notice; the schedule's pause is drawn at 3.7 s or more (tenths)."""
PARTNER_PAUSE = 1.9
"""`kill-r1-with-pause-r2`: the gap (s) r2 must notice; the schedule's pause is 2.0 s or more."""
_HEARTBEAT = 0.05
_NOTICED = 0.5
"""A gap this long is written to the replica's record (others read it)."""

PLANTED: dict[str, str] = {
    "pause-amnesia-r1": "r1 forgets its keys once paused for 3.6 s or more",
    "kill-twice-r3": "r3 forgets its keys in a life after two kills of it",
    "restart-then-kill-r2": "r2 forgets its keys in a life after a restart and then a kill of it",
    "kill-r1-with-pause-r2": "r1, after a kill of it, forgets its keys once r2 has been paused for 1.9 s or more",
    "pause-then-kill-r2": "r2 forgets its keys in a life after a kill that came once a pause of it for 1.9 s or more "
                          "had ended",
}
"""Every planted fault by name, with what it does."""


def planted_names(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The planted faults the environment names (none when unset); an unknown name raises ValueError."""
    text = (os.environ if environ is None else environ).get(PLANTED_ENV, "")
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(names - PLANTED.keys())
    if unknown:
        raise ValueError(f"{PLANTED_ENV}: no planted fault {', '.join(unknown)} (known: {', '.join(PLANTED)})")
    return names


@dataclass
class _Record:
    """One replica's record beside its ring: each life's end (True: clean, None: still running), its longest gap, and
    the lives (by index) in which it noticed a gap of `PARTNER_PAUSE` or more."""

    lives: list[bool | None]
    gap: float
    paused: list[int] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> _Record:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls([life if isinstance(life, bool) else None for life in data["lives"]], float(data["gap"]),
                       [int(life) for life in data.get("paused", [])])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls([], 0.0)

    def write(self, path: Path) -> None:
        spare = path.with_suffix(".tmp")
        spare.write_text(json.dumps({"lives": self.lives, "gap": self.gap, "paused": self.paused}), encoding="utf-8")
        spare.replace(path)


class PlantedGuard:
    """What a replica with planted faults checks before opening a state: has one of its faults taken hold?"""

    def __init__(self, names: frozenset[str], label: str, folder: Path) -> None:
        self.names, self.label, self.folder = names, label, folder
        self._path = folder / f"planted-{label}.json"
        record = _Record.read(self._path)
        self._before = [life is True for life in record.lives]  # a life still marked running ended in a kill
        self._record = _Record([*self._before, None], record.gap, record.paused)
        self._record.write(self._path)
        self._lock = threading.Lock()
        self._held_since: float | None = None
        self._minted: set[str] = set()
        threading.Thread(target=self._heartbeat, name="planted-heartbeat", daemon=True).start()

    def stopped(self) -> None:
        """The replica stops cleanly: its life ended in a restart, not a kill."""
        with self._lock:
            self._record.lives[-1] = True
            self._record.write(self._path)

    def sealed(self, token: str) -> None:
        """A state this replica minted: once a fault holds, the only ones it still opens."""
        if self._held_since is not None:
            self._minted.add(token)

    def refuses(self, token: str) -> bool:
        """True: a fault holds and this state was not minted since (reject it as `unknown key`)."""
        if self._held_since is None and self._holds():
            self._held_since = time.monotonic()
            logger.warning("planted fault took hold on %s: %s", self.label, ", ".join(sorted(self.names)))
        return self._held_since is not None and token not in self._minted

    def _holds(self) -> bool:
        kills = [index for index, clean in enumerate(self._before) if not clean]
        restarts = [index for index, clean in enumerate(self._before) if clean]
        if "pause-amnesia-r1" in self.names and self.label == "r1" and self._record.gap >= LONG_PAUSE:
            return True
        if "kill-twice-r3" in self.names and self.label == "r3" and len(kills) >= 2:
            return True
        if ("restart-then-kill-r2" in self.names and self.label == "r2" and restarts
                and any(kill > restarts[0] for kill in kills)):
            return True
        if ("pause-then-kill-r2" in self.names and self.label == "r2" and self._record.paused
                and any(kill >= self._record.paused[0] for kill in kills)):
            return True
        return ("kill-r1-with-pause-r2" in self.names and self.label == "r1" and bool(kills)
                and _Record.read(self.folder / "planted-r2.json").gap >= PARTNER_PAUSE)

    def _heartbeat(self) -> None:
        """Note the longest gap between beats (a pause); ends when the record's folder is gone (its run is over)."""
        last = time.monotonic()
        while True:
            time.sleep(_HEARTBEAT)
            now = time.monotonic()
            gap, last = now - last, now
            life = len(self._before)
            long_here = gap >= PARTNER_PAUSE and life not in self._record.paused
            if gap >= _NOTICED and (gap > self._record.gap or long_here):
                with self._lock:
                    self._record.gap = max(gap, self._record.gap)
                    if long_here:
                        self._record.paused.append(life)
                    try:
                        self._record.write(self._path)
                    except FileNotFoundError:
                        return


def planted_guard(keyring: str, label: str, environ: Mapping[str, str] | None = None) -> PlantedGuard | None:
    """The guard for a replica started with planted faults (None: none named). They need a `file:` key ring, whose
    folder holds the replicas' records."""
    names = planted_names(environ)
    if not names:
        return None
    if not keyring.startswith("file:"):
        raise ValueError(f"{PLANTED_ENV} needs a file: key ring (its folder holds the planted faults' records)")
    return PlantedGuard(names, label, Path(keyring.removeprefix("file:")).parent)
