"""Every principal's token for the round loop, fetched before the load and refreshed in the background.

Lead i of the load is principal i mod `principals`, and each principal holds its own token.
A round reads its lead's ready-made `Authorization` value from a list: no lock, no I/O.
One background greenlet refreshes each token `refresh_margin` before it runs out (at most
`concurrency` requests at once); a refresh that fails keeps the old token, which the
rounds go on carrying until the server refuses it, and is tried again a little later
(`RETRY_AFTER`). After a 401 `invalid_token` a round's greenlet asks `renew`, which waits
for one refresh of that principal (shared by every round that asked meanwhile).
With `refresh = false` a principal keeps its first token for the whole run.

No principal's token is asked for twice within `MIN_REFRESH_INTERVAL`, whatever asks: a
source that hands back a token already expired (a clock ahead of the issuer's, a lifetime
shorter than the margin) would otherwise be asked again at once, in a tight loop. A token
that comes expired, or expiring within the floor, is "expired on arrival": warned once, and
counted apart from the refreshes that worked.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from typing import Final, Protocol

import gevent
from gevent.event import AsyncResult, Event
from gevent.lock import BoundedSemaphore
from gevent.pool import Group, Pool

from harness.auth.errors import TokenEndpointError
from harness.auth.token import Token

logger = logging.getLogger(__name__)

RETRY_AFTER: Final = 2.0
"""Seconds before a refresh that failed is tried again (an authorization server that is down)."""
RENEW_TIMEOUT: Final = 15.0
"""Seconds a round waits for its lead's renewed token before the round is given up as refused."""
IDLE_CHECK: Final = 60.0
"""Seconds the refresher sleeps when no token is due (none expires): it wakes when told to stop."""
MIN_REFRESH_INTERVAL: Final = 1.0
"""Seconds at least between two token requests for one principal (the floor under every refresh)."""
EXPIRED_ON_ARRIVAL: Final = "expired_on_arrival"
"""A refresh whose token came already expired, or expiring within the floor (before it could be asked for again)."""


class TokenSource(Protocol):
    """Where tokens come from: `fetch` blocks its greenlet and raises TokenEndpointError."""

    refreshable: bool

    def describe(self) -> str: ...

    def fetch(self, principal: int) -> Token: ...

    def close(self) -> None: ...


class LeadTokens:
    """One token per principal, behind `harness.mrtr.credentials.Credentials`."""

    def __init__(self, source: TokenSource, principals: int, *, concurrency: int = 4, refresh: bool = True,
                 margin: float = 30.0, clock: Callable[[], float] = time.time,
                 on_refresh: Callable[[str], None] | None = None, floor: float = MIN_REFRESH_INTERVAL) -> None:
        """`on_refresh(outcome)`: told of every refresh after the first tokens, `ok`, `EXPIRED_ON_ARRIVAL` or
        `failed` (the run's metrics count them). `clock`: epoch seconds, what expiries and the floor are read on."""
        self.source = source
        self.principals = principals
        self.refresh = refresh and source.refreshable
        self.margin = margin
        self.floor = floor
        self._clock = clock
        self._pool = Pool(concurrency)
        self._slots = BoundedSemaphore(concurrency)
        self._refreshes = Group()
        """The refreshes under way, each waiting out the floor and then for one of the `concurrency` slots."""
        self._asked: list[float] = [float("-inf")] * principals
        """When each principal's token was last asked for (on `clock`)."""
        self._warned_spent = False
        self._tokens: list[Token | None] = [None] * principals
        self._headers: list[str] = [""] * principals
        self._holders: list[str] = [""] * principals
        """Whom each principal's token stands for (`Token.holder`), read once per token."""
        self._pending: dict[int, AsyncResult] = {}
        self._heap: list[tuple[float, int, int]] = []
        """(due, principal, generation of the token it was due for): the refreshes to come."""
        self._generation: list[int] = [0] * principals
        self._changed = Event()
        self._refresher: gevent.Greenlet | None = None
        self.refreshed = 0
        """Tokens obtained after the first ones (in the background, or after a 401)."""
        self.failed = 0
        """Refreshes that failed."""
        self._on_refresh = on_refresh
        self._failing = False
        """A refresh failed and none has succeeded since: further failures are not logged one by one."""

    # --- the round loop's side (harness.mrtr.credentials.Credentials) -------------------------

    def authorization(self, lead: int) -> str:
        return self._headers[lead % self.principals]

    def other_principal(self, lead: int) -> int | None:
        """A lead whose token stands for someone else than `lead`'s (the first such principal after it), or None when
        every principal's token stands for the same one (a tokens file shorter than `principals`, a token command
        that ignores {lead}): then a round sent "as another principal" would go as the same one."""
        own = lead % self.principals
        for step in range(1, self.principals):
            other = (own + step) % self.principals
            if self._holders[other] != self._holders[own]:
                return other
        return None

    def renew(self, lead: int, since: float) -> bool:
        principal = lead % self.principals
        token = self._tokens[principal]
        if token is not None and token.obtained_at > since:
            return True  # renewed already, after the refused round was sent
        if not self.refresh:
            return False
        try:
            return self._refresh(principal).get(timeout=RENEW_TIMEOUT) is not None
        except gevent.Timeout:
            return False

    # --- the run's side ---------------------------------------------------------------------

    def start(self) -> None:
        """Fetch every principal's token (bounded concurrency), then start refreshing; the first failure raises."""
        for principal, got in enumerate(self._pool.imap(self._first, range(self.principals))):
            if isinstance(got, TokenEndpointError):
                self._pool.kill(block=True, timeout=5)
                raise got
            self._keep(principal, got)
        self.refreshed = 0
        if self.refresh:
            self._refresher = gevent.spawn(self._refresh_loop)

    def stop(self) -> None:
        """Stop refreshing and close the source (the run is over)."""
        if self._refresher is not None:
            self._refresher.kill(block=True, timeout=5)
        self._refreshes.kill(block=True, timeout=5)
        self._pool.kill(block=True, timeout=5)
        self.source.close()

    # --- refreshing ---------------------------------------------------------------------------

    def _first(self, principal: int) -> Token | TokenEndpointError:
        """A principal's first token, or why there is none (returned: a greenlet's raise would print a traceback)."""
        self._asked[principal] = self._clock()
        try:
            return self.source.fetch(principal)
        except TokenEndpointError as exc:
            return exc

    def _keep(self, principal: int, token: Token) -> bool:
        """Hold `principal`'s new token and schedule its refresh; True when it came expired (or as good as)."""
        self._tokens[principal] = token
        self._headers[principal] = token.authorization
        self._holders[principal] = token.holder()
        self._generation[principal] += 1
        self.refreshed += 1
        self._schedule(principal, token.due(self.margin))
        left = token.expires_at - self._clock() if token.expires_at is not None else None
        spent = left is not None and left <= self.floor
        if spent and not self._warned_spent:
            self._warned_spent = True
            logger.warning("the token for lead %d arrived expired, or expiring within %gs (it expires %+.1fs from "
                           "now): tokens are asked for no sooner than every %gs per lead; check the token source's "
                           "lifetimes and this machine's clock (not logged again)", principal, self.floor, left,
                           self.floor)
        return spent

    def _schedule(self, principal: int, due: float | None) -> None:
        """Put `principal`'s next refresh on the heap (none for a token that never expires, or with refresh off)."""
        if due is not None and self.refresh:
            heapq.heappush(self._heap, (due, principal, self._generation[principal]))
            if due <= self._heap[0][0]:
                self._changed.set()  # sooner than the refresher's current sleep

    def _refresh(self, principal: int) -> AsyncResult:
        """The refresh of `principal` under way, or a new one: every caller waits on the same request."""
        pending = self._pending.get(principal)
        if pending is None:
            pending = self._pending[principal] = AsyncResult()
            self._refreshes.spawn(self._fetch, principal, pending)
        return pending

    def _wait_floor(self, principal: int) -> None:
        """Until `floor` has passed on the clock since `principal`'s token was last asked for."""
        while (left := self._asked[principal] + self.floor - self._clock()) > 0:
            gevent.sleep(left)
        self._asked[principal] = self._clock()

    def _fetch(self, principal: int, pending: AsyncResult) -> None:
        """One refresh, no sooner than the floor allows; `on_refresh` hears of it only if it ended: one cut short by
        `stop` neither failed nor succeeded (counting it failed would show an outage at the end of every run)."""
        token: Token | None = None
        ended = spent = False
        try:
            self._wait_floor(principal)
            with self._slots:
                token = self.source.fetch(principal)
            ended = True
        except Exception as exc:  # noqa: BLE001 - whatever failed, the old token is kept and the refresh retried
            ended = True
            self.failed += 1
            self._schedule(principal, self._clock() + RETRY_AFTER)
            if not self._failing:
                logger.warning("token refresh for lead %d failed (old tokens are kept, refreshes retried every "
                               "%gs; not logged again until one succeeds): %s", principal, RETRY_AFTER, exc)
            self._failing = True
        else:
            spent = self._keep(principal, token)
            if self._failing:
                logger.warning("token refreshes succeed again (%d had failed)", self.failed)
            self._failing = False
        finally:
            if self._on_refresh is not None and ended:
                self._on_refresh("failed" if token is None else EXPIRED_ON_ARRIVAL if spent else "ok")
            self._pending.pop(principal, None)
            pending.set(token)

    def _refresh_loop(self) -> None:
        """Refresh each token when it is due (a heap by due time); sleep until the next one is."""
        heap = self._heap
        while True:
            now = self._clock()
            while heap and heap[0][0] <= now:
                _, principal, held = heapq.heappop(heap)
                if self._generation[principal] == held:  # not renewed meanwhile (a 401's renewal)
                    self._refresh(principal)
            self._changed.clear()
            self._changed.wait(min(IDLE_CHECK, max(heap[0][0] - now, 0.01)) if heap else IDLE_CHECK)
