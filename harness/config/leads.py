"""`[leads]`: how the simulated people behave (think times, and the share who decline, cancel or abandon)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.config.think import ConstantThink, LognormalThink, ThinkTime


class LeadProfile(BaseModel):
    """How a population of leads behaves: the `[leads]` table of a scenario file.

    Probabilities are per round; accept gets what decline, cancel and abandon leave.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    think: ThinkTime = Field(default_factory=lambda: LognormalThink(median=120.0, p95=720.0),
                             description="how long a lead thinks before each answer, modelled (the answer "
                                         "may go out up to 20 ms of real time early)")
    decline: float = Field(default=0.0, ge=0.0, le=1.0, description="share of rounds the lead declines")
    cancel: float = Field(default=0.0, ge=0.0, le=1.0, description="share of rounds the lead dismisses")
    abandon: float = Field(default=0.0, ge=0.0, le=1.0, description="share of rounds the lead never answers")
    url_completion: ThinkTime = Field(default_factory=lambda: ConstantThink(value=30.0),
                                      description="URL mode: time from accepting to finishing the page, modelled")
    """Time from accepting a URL-mode request to finishing the page out of band."""
    overrides: dict[str, Any] = Field(default_factory=dict, description="form answers that win over generated "
                                        "ones, by field name; a list is the choices a lead picks one from")
    """Field answers that win over generated ones, e.g. {"release": True} for the refund flow; a list is the
    choices a lead picks one from (a `call` flow's `answers` are merged in here)."""

    @model_validator(mode="after")
    def _probabilities_fit(self) -> LeadProfile:
        total = self.decline + self.cancel + self.abandon
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"decline + cancel + abandon = {total:g} exceeds 1 "
                f"(decline={self.decline:g}, cancel={self.cancel:g}, abandon={self.abandon:g})"
            )
        return self

    @property
    def accept(self) -> float:
        """The share of rounds the lead accepts."""
        return max(0.0, 1.0 - self.decline - self.cancel - self.abandon)
