"""The hunt's memory: every minimal failing schedule kept in a corpus folder, and replayed first by later hunts.

As Hypothesis replays its database before it generates anything, a hunt given `--corpus DIR`
first replays each entry of each folder named (a minimal scenario a hunt saved there, or any
scenario with `[[chaos]]`: `scenarios/on-call/` is a corpus too), then searches; a hunt that finds
a failure saves its minimal scenario into the first folder named, under a name made of the
scenario's name, the failure and a digest of the schedule, so the same schedule is kept once.

A corpus is untrusted input, whoever wrote it: each `*.toml` directly in the folder is read
without following a symbolic link (a link planted there is refused, not read; nor is anything
that is not a plain file), at most `ENTRY_BYTES` of it and at most `MOST_ENTRIES` a folder,
parsed as TOML only (nothing is run, imported or unpickled) and validated as a scenario; its
name is shown only through `harness.foreign_text`. An entry replays its `[[chaos]]` steps, its
duration, its seed and, when it differs from the hunted scenario's, its arrival rate, against the
hunted scenario (not its target, flows or knobs); an entry with no chaos step (most of
`scenarios/on-call/` fail by their own target and flows), with a step this hunt does not draw (an
action or a replica left out) or cannot run, or with the same schedule as one replayed before it,
is skipped and said so. A minimal schedule with no chaos step is not kept, for the same reason.
Saving never writes through a link (`harness.atomic_files`), and a schedule the corpus already
replays is not kept twice.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import foreign_text
from harness.atomic_files import write_atomically
from harness.capped_read import NotPlain, TooLarge, read_capped
from harness.config.chaos import ChaosStep
from harness.config.scenario import Scenario, parse_scenario
from harness.errors import MrtrHarnessError
from harness.hunt.draw import Space
from harness.hunt.model import Failure, Schedule, step_table

ENTRY_BYTES = 256 * 1024
"""The most of a corpus file read: a scenario is a few kilobytes; more is not one."""
MOST_ENTRIES = 500
"""The most `*.toml` files read from one folder (in name order): the rest are skipped and said so."""
NAME_CHARACTERS = 48
NO_CHAOS = ("no [[chaos]] step: what fails in it is its target, flows or load, which a replay does not carry (a "
            "failure under load alone is for a no-chaos run to find)")
"""The longest scenario or failure name a saved entry's file name takes."""


@dataclass(frozen=True)
class Entry:
    """One corpus entry to replay: where it came from (shown safe) and the schedule it replays."""

    name: str
    """The folder and file name, as `foreign_text.line` shows it."""
    path: Path
    schedule: Schedule
    seed: int


@dataclass(frozen=True)
class Skipped:
    """A corpus file not replayed, and why, in one line."""

    name: str
    why: str


def shown(path: Path) -> str:
    """A corpus file's folder and name as one safe line (a name is foreign text: controls, escapes, anything)."""
    return foreign_text.line(f"{path.parent.name}/{path.name}", 120)


def read_corpus(folders: Sequence[Path], base_rate: float | None) -> tuple[list[Entry], list[Skipped]]:
    """Every entry of the folders (each a scenario file, validated), and the files skipped; `base_rate`: the hunted
    scenario's arrival rate (an entry's own, when it differs, is replayed with it). A missing folder is no entry."""
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    for folder in folders:
        try:
            names = sorted(name for name in os.listdir(folder) if name.endswith(".toml"))
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                skipped.append(Skipped(foreign_text.line(str(folder), 120),
                                       f"the corpus folder cannot be read: {exc.strerror}"))
            continue
        for name in names[MOST_ENTRIES:]:
            skipped.append(Skipped(shown(folder / name), f"more than {MOST_ENTRIES} entries in its folder"))
        for name in names[:MOST_ENTRIES]:
            read = read_entry(folder / name, base_rate)
            if isinstance(read, Entry):
                entries.append(read)
            else:
                skipped.append(read)
    return entries, skipped


def read_entry(path: Path, base_rate: float | None) -> Entry | Skipped:
    """One corpus file as an entry, or why it is skipped: never an exception for what the file holds."""
    name = shown(path)
    try:
        raw = _read_plain_file(path)
    except _Refused as refused:
        return Skipped(name, str(refused))
    try:
        scenario = parse_scenario(raw.decode("utf-8"), path.name)
    except UnicodeDecodeError:
        return Skipped(name, "not UTF-8 text")
    except (MrtrHarnessError, RecursionError) as exc:  # RecursionError: TOML nested past what Python parses
        return Skipped(name, f"not a valid scenario: {foreign_text.line(exc, 200)}")
    if not scenario.chaos:
        return Skipped(name, NO_CHAOS)
    return Entry(name, path, entry_schedule(scenario, base_rate), scenario.seed)


def entry_schedule(scenario: Scenario, base_rate: float | None) -> Schedule:
    """The schedule a scenario replays: its chaos steps in order of `at`, its duration, and its arrival rate when it
    differs from the hunted scenario's (None: the hunted scenario's own load)."""
    rate = scenario.load.arrival_rate
    steps: tuple[ChaosStep, ...] = tuple(sorted(scenario.chaos, key=lambda step: step.at))
    return Schedule(steps=steps, duration=scenario.duration, arrival_rate=rate if rate != base_rate else None)


class _Refused(Exception):
    """A corpus file not read, and why."""


def _read_plain_file(path: Path) -> bytes:
    """At most `ENTRY_BYTES` of a plain file, opened without following a link (a planted link is refused) and
    without blocking on a pipe; `_Refused` says why not."""
    try:
        return read_capped(path, ENTRY_BYTES, plain_only=True)
    except NotPlain as exc:
        why = f"{exc} (a corpus entry must be a file in its folder)" if "link" in str(exc) else str(exc)
        raise _Refused(why) from None
    except TooLarge:
        raise _Refused(f"larger than {ENTRY_BYTES // 1024} KiB: not a scenario") from None
    except OSError as exc:
        raise _Refused(f"cannot be read: {exc.strerror}") from None


def replayable(entries: Sequence[Entry], space: Space, fits: Callable[[Schedule], bool]
               ) -> tuple[list[Entry], list[Skipped]]:
    """The entries this hunt can replay, each schedule once: every step's action and replica within what the hunt
    draws (`--actions`, `--replicas` leave the rest out), and the schedule runs in the hunted scenario (`fits`)."""
    kept: list[Entry] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for entry in entries:
        outside = sorted({step.action for step in entry.schedule.steps if step.action not in space.actions})
        replicas = sorted({replica for step in entry.schedule.steps for replica in _named(step)
                           if replica not in space.replicas})
        digest = schedule_digest(entry.schedule)
        if outside:
            skipped.append(Skipped(entry.name, f"acts by {', '.join(outside)}, which this hunt does not draw"))
        elif replicas:
            skipped.append(Skipped(entry.name, f"names replica {', '.join(map(str, replicas))}, which this hunt "
                                               "leaves out"))
        elif digest in seen:
            skipped.append(Skipped(entry.name, "the same schedule as an entry replayed before it"))
        elif not fits(entry.schedule):
            skipped.append(Skipped(entry.name, "its schedule does not validate in the hunted scenario"))
        else:
            seen.add(digest)
            kept.append(entry)
    return kept, skipped


def schedule_digest(schedule: Schedule) -> str:
    """12 hex digits that name a schedule: its steps as written back, its duration and rate."""
    data = {"steps": [step_table(step) for step in schedule.steps], "duration": schedule.duration,
            "arrival_rate": schedule.arrival_rate}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:12]


def entry_name(scenario: str, failure: Failure, schedule: Schedule) -> str:
    """A saved entry's file name: `<scenario>-<failure>-<digest>.toml`, of letters, digits, `_` and `-` (and the
    `.toml`): a name read from a scenario never makes a path, a hidden file or an option."""
    return f"{_word(scenario)}-{_word(f'{failure.kind}-{failure.name}')}-{schedule_digest(schedule)}.toml"


def _word(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-_")[:NAME_CHARACTERS].strip("-_") or "x"


def save(folder: Path, text: str, scenario: str, failure: Failure, schedule: Schedule,
         known: Sequence[Entry] = ()) -> tuple[Path, bool]:
    """Keep a minimal scenario's `text` in the corpus folder (made if missing): (its path, whether it is new). A
    schedule an entry read from the corpus (`known`) already replays is not kept again (that entry's path), nor the
    same schedule failing the same way; a link planted at its name is refused (`PlantedLink`)."""
    digest = schedule_digest(schedule)
    same = next((entry for entry in known if schedule_digest(entry.schedule) == digest), None)
    if same is not None:
        return same.path, False
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / entry_name(scenario, failure, schedule)
    if path.is_file() and not path.is_symlink():
        return path, False
    return write_atomically(path, text), True


def _named(step: ChaosStep) -> tuple[int, ...]:
    """The replicas (1-based) a step names: none, one or several."""
    named = step.named()
    return named if isinstance(named, tuple) else (named,) if named is not None else ()
