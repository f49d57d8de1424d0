"""The shop's orders: every order of a seed, generated deterministically from it.

Every process that needs an order (the API, a test, a flow picking an order to refund)
regenerates the same orders from the same seed, so nothing about orders has to be
stored or shipped, and a scenario's seed reproduces which refunds land on which side
of the policy limit.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal

POLICY_LIMIT_CENTS: Final = 150_00
"""The refund policy: any refund above EUR 150.00 waits for a support lead to confirm it."""

DEFAULT_SEED: Final = 2026
DEFAULT_ORDER_COUNT: Final = 5000
FIRST_ORDER_NUMBER: Final = 1000

_KITCHEN = ("chef's knife", "cast-iron pan", "stock pot", "spice rack", "stand mixer", "kettle", "cutting board")
_GARDEN = ("pruning shears", "watering can", "raised bed kit", "hose reel", "seed tray", "wheelbarrow", "trellis")
_DIGITAL = ("gardening course", "recipe e-book", "gift card")


@dataclass(frozen=True, slots=True)
class OrderLine:
    sku: str
    title: str
    kind: Literal["physical", "digital"]
    amount_cents: int


@dataclass(frozen=True, slots=True)
class Order:
    order_id: str
    lines: tuple[OrderLine, ...]

    @property
    def total_cents(self) -> int:
        return sum(line.amount_cents for line in self.lines)

    @property
    def needs_confirmation(self) -> bool:
        return self.total_cents > POLICY_LIMIT_CENTS

    def line(self, sku: str) -> OrderLine | None:
        return next((line for line in self.lines if line.sku == sku), None)


def format_cents(cents: int) -> str:
    """EUR amounts as the shop writes them: 234.56."""
    return f"{cents // 100}.{cents % 100:02d}"


@dataclass(frozen=True, slots=True)
class Orders:
    """All orders of one seed, by id, with helpers the flows use to pick one."""

    seed: int
    orders: dict[str, Order]

    def get(self, order_id: str) -> Order | None:
        return self.orders.get(order_id)

    def order_ids(self, *, needs_confirmation: bool | None = None) -> list[str]:
        return [
            order.order_id
            for order in self.orders.values()
            if needs_confirmation is None or order.needs_confirmation == needs_confirmation
        ]


@lru_cache(maxsize=8)
def build_orders(seed: int = DEFAULT_SEED, count: int = DEFAULT_ORDER_COUNT) -> Orders:
    """Generate `count` orders from `seed`: the same arguments give the same orders in every process.

    Order totals spread on both sides of the policy limit (roughly half above it), and
    about one line in six is digital, so refund, return and payout flows all find work.
    """
    rng = random.Random(hashlib.sha256(f"shop-catalogue:{seed}".encode()).digest())
    orders: dict[str, Order] = {}
    for number in range(FIRST_ORDER_NUMBER, FIRST_ORDER_NUMBER + count):
        order_id = f"O-{number}"
        orders[order_id] = Order(order_id, _lines(rng))
    return Orders(seed, orders)


def _lines(rng: random.Random) -> tuple[OrderLine, ...]:
    target_total = rng.randint(5_00, 300_00)
    count = rng.choice((1, 1, 2, 2, 3))
    shares = [rng.random() + 0.2 for _ in range(count)]
    lines = []
    for index, share in enumerate(shares):
        amount = max(1_00, round(target_total * share / sum(shares)))
        lines.append(_line(rng, index, amount))
    return tuple(lines)


def _line(rng: random.Random, index: int, amount_cents: int) -> OrderLine:
    if rng.random() < 1 / 6:
        return OrderLine(f"DG-{rng.randint(100, 999)}{index}", rng.choice(_DIGITAL), "digital", amount_cents)
    title = rng.choice(_KITCHEN + _GARDEN)
    prefix = "KT" if title in _KITCHEN else "GD"
    return OrderLine(f"{prefix}-{rng.randint(1000, 9999)}", title, "physical", amount_cents)
