"""What every scenario model shares: strict tables, and the errors that name a field and its line."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.errors import UsageError


class ScenarioError(UsageError):
    """A scenario that cannot run, with the file, the field and the line when known."""


class FieldProblem(ValueError):
    """A model validator's error that belongs to one field of its table: `where` is that field's path in the table.

    Pydantic places a model validator's error on the whole table (or, at the top level, on
    nothing), so the error could name no line; `_explain` appends `where` to the location.
    """

    def __init__(self, message: str, *where: str | int) -> None:
        super().__init__(message)
        self.where = where


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


