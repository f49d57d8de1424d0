"""Where each round of a call lands.

A stateless MRTR server promises that a retry may land on any replica. Keep-alive
connections and sticky balancers quietly break that promise's test: every retry goes
back to the replica that minted the state, and every cross-replica failure (a key
only one process has, a record only one process sees) stays hidden. So the harness
chooses the replica of every round itself, as a scenario setting, and the journal
records which replica served each round.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from harness.config.load import Routing

__all__ = ["Router", "Routing"]


class Router:
    """Decides the replica URL of each round, given the replica of the call's previous round.

    A target is a list of replica URLs or a single balancer URL; with one URL every
    strategy returns it (the balancer then decides, and the transport should send
    `Connection: close` so it can decide per round). One router is shared by every
    call in a process; `pick` never yields to another greenlet, so no lock is needed.
    """

    __slots__ = ("replicas", "strategy", "_rng", "_next")

    def __init__(
        self,
        replicas: Sequence[str] | str,
        strategy: Routing | str = Routing.ROUND_ROBIN,
        *,
        rng: random.Random | None = None,
    ) -> None:
        urls = (replicas,) if isinstance(replicas, str) else tuple(replicas)
        if not urls:
            raise ValueError("a router needs at least one replica URL")
        self.replicas: tuple[str, ...] = urls
        self.strategy = Routing(strategy)
        self._rng = rng if rng is not None else random.Random(0)
        self._next = 0

    def pick(self, previous: str | None = None) -> str:
        """The replica for the next round; `previous` is this call's last replica (None on round 1)."""
        if len(self.replicas) == 1:
            return self.replicas[0]
        strategy = self.strategy
        if strategy is Routing.RANDOM:
            return self._rng.choice(self.replicas)
        if previous is not None and strategy is Routing.SAME_REPLICA:
            return previous
        replica = self._cycle()
        if replica == previous and strategy is Routing.OTHER_REPLICA:
            replica = self._cycle()
        return replica

    def _cycle(self) -> str:
        replica = self.replicas[self._next]
        self._next = (self._next + 1) % len(self.replicas)
        return replica
