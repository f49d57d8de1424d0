"""The replica knobs chaos turns (TTL, name, clock offset, store): one row each, read wherever they are spelled.

A knob is a setting a chaos action restarts a replica with a new value of. Its row names it once:
the word (the field of `ReplicaChange`, `ReplicaOptions` and the replica's own `ReplicaSettings`,
the same in each), the replica command's option, that option's default and its help. The shop's
arguments, `replica_args` (every backend's replica command line), the docker target's flag edits
and the embedded target's options read this table; the chaos action that turns a knob says so on
its model (`turns`), and the command target's reconfigure commands are read off those models
(`harness.config.chaos.knob_commands`). tests/test_replica_knobs.py fails when a place misses a knob.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KNOBS", "REPLICA_KNOBS", "ReplicaKnob"]


@dataclass(frozen=True)
class ReplicaKnob:
    """One setting a replica is restarted with: its word, its command-line option, the option's default and help."""

    name: str
    option: str
    default: str
    help: str
    chaos: bool = True
    """Whether a chaos action turns it; False: a planted fault a scenario sets per replica at start
    (`[[target.overrides]]`), which no action restarts a replica with."""

    def argument(self, value: object) -> list[str]:
        """The replica command's arguments that set this knob to `value`."""
        return [self.option, str(value)]


REPLICA_KNOBS: tuple[ReplicaKnob, ...] = (
    ReplicaKnob("store", "--store", "sqlite:results/shop/shop.db",
                "shared records: sqlite:PATH (default), redis://HOST:PORT[/DB] or memory"),
    ReplicaKnob("ttl", "--ttl", "10m", "how long a requestState stays valid (default 10m)"),
    ReplicaKnob("name", "--name", "shop", "server name, which is also the state's audience"),
    ReplicaKnob("clock_offset", "--clock-offset", "0",
                "seconds this replica's sealing clock runs ahead (negative: behind), e.g. 120 or -30"),
    # A planted leak, to prove the replica_rss_growth gate fails (set at start only).
    ReplicaKnob("leak", "--leak", "0", "MB a minute this replica's memory grows while it serves (a planted leak, "
                "e.g. 50; default 0: none)", chaos=False),
)
"""Every knob, in the order the replica's command line gives them."""

KNOBS: dict[str, ReplicaKnob] = {knob.name: knob for knob in REPLICA_KNOBS}
"""The knobs by word."""
