"""The shop's orders as its flows pick them: what `FlowEnv.shop` holds when a scenario has the shop's flows."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.shop.orders import Orders


@dataclass
class ShopOrders:
    """The shop's orders as its flows pick them: those a lead must confirm (above the limit), the others, all."""

    orders: Orders
    held: list[str] = field(init=False)
    small: list[str] = field(init=False)
    all: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.held = self.orders.order_ids(needs_confirmation=True)
        self.small = self.orders.order_ids(needs_confirmation=False)
        self.all = self.orders.order_ids()
