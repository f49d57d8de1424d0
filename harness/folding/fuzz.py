"""The fuzzer's table: per mutation class, what was sent, how the servers answered, and the reasons they logged.

Folded from the journal in the reports' one pass: a `fuzz` flow's `flow` record says which
class it sent and how the answer counts (`harness.load.mutations.answer_of`); the reason
exists only in a replica's log line. A rejected mutant is paired with a logged line on the
replica that served its round, in three passes: a line with a reason its class expects
inside the round itself (the mutants with the fewest such lines first), then any line
inside the round, then any line inside the round's window widened by the reconciliation's
slack. Two mutants sent to one replica in the same millisecond cannot be told apart by
time, hence the expected reasons first; a mutant whose round holds only unexpected lines
still gets one, so a wrong reason shows. The reconciliation itself keeps no pairs, and
other flows' rejections on the same replica at the same moment can take a mutant's line:
the reasons are exact for well-separated rounds and close otherwise. A rejected mutant
no line explains counts as `unlogged`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.config.flows import FuzzFlow
from harness.config.mutations import EnvelopeMutation, Mutation
from harness.config.scenario import Scenario
from harness.folding.reconcile import SLACK_AFTER, SLACK_BEFORE
from harness.journal.records import RecordType
from harness.journal.writer import JournalView
from harness.load.envelope import REQUIRED, SDK_DEVIATIONS, EnvelopeAnswer
from harness.load.mutations import EXPECTED_REASONS, FINDINGS, MutantAnswer
from harness.mrtr.outcome import Outcome

_INVALID_STATE = Outcome.INVALID_STATE.value
"""A rejected round's outcome, as a plain string: a plain comparison costs less than an enum member's."""

EXAMPLES = 3
_STAMP = 0.002
"""A log line's own time has millisecond resolution: a line stamped inside its round may read a little outside."""
COLUMNS = ("sent", *(answer.value for answer in MutantAnswer))
"""The counts of a row, in the order every output shows them."""
ENVELOPE_COLUMNS = ("sent", *(answer.value for answer in EnvelopeAnswer))
"""The counts of an envelope row, in the order every output shows them."""


@dataclass
class MutationRow:
    """One mutation class: how many were sent, each answer's count, the reasons logged, examples of findings."""

    mutation: str
    counts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    findings: list[str] = field(default_factory=list)

    @property
    def expected_reasons(self) -> list[str]:
        known = Mutation._value2member_map_.get(self.mutation)
        return sorted(EXPECTED_REASONS.get(Mutation(self.mutation), ())) if known else []

    @property
    def unexpected_reasons(self) -> int:
        expected = set(self.expected_reasons)
        return sum(count for reason, count in self.reasons.items() if reason != "unlogged" and reason not in expected)

    def as_dict(self) -> dict[str, Any]:
        return {**{column: self.counts[column] for column in COLUMNS}, "reasons": dict(sorted(self.reasons.items())),
                "expected_reasons": self.expected_reasons, "unexpected_reasons": self.unexpected_reasons,
                "examples": list(self.findings)}


@dataclass
class EnvelopeRow:
    """One envelope class: how many were sent, each answer's count, and what came instead of the required answer."""

    mutation: str
    counts: Counter[str] = field(default_factory=Counter)
    got: Counter[str] = field(default_factory=Counter)

    @property
    def required(self) -> str:
        known = EnvelopeMutation._value2member_map_.get(self.mutation)
        return REQUIRED[EnvelopeMutation(self.mutation)].text if known else ""

    @property
    def sdk_deviation(self) -> str:
        """What the Python SDK's server is known to answer instead, when it deviates ("" when it does not)."""
        known = EnvelopeMutation._value2member_map_.get(self.mutation)
        return SDK_DEVIATIONS.get(EnvelopeMutation(self.mutation), "") if known else ""

    def as_dict(self) -> dict[str, Any]:
        return {**{column: self.counts[column] for column in ENVELOPE_COLUMNS}, "required": self.required,
                "answered_instead": dict(sorted(self.got.items())), "sdk_deviation": self.sdk_deviation}


@dataclass(frozen=True)
class FuzzTable:
    """What the reports show: one row per class sent, and the chosen classes no flow could send, with why."""

    rows: list[MutationRow]
    skipped: dict[str, str]
    envelope: list[EnvelopeRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rows or self.skipped or self.envelope)

    def as_dict(self) -> dict[str, Any]:
        return {"by_mutation": {row.mutation: row.as_dict() for row in self.rows}, "skipped": dict(self.skipped),
                "by_envelope": {row.mutation: row.as_dict() for row in self.envelope}}


@dataclass
class FuzzFold(JournalView):
    """Fuzz flows' records, their rejected rounds and the logged rejections, in one pass over the journal."""

    mutants: list[dict[str, Any]] = field(default_factory=list)
    rejected_rounds: dict[tuple[str, int], tuple[float, float, str]] = field(default_factory=dict)
    logged: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    skipped_at_run: dict[str, Counter[str]] = field(default_factory=dict)
    """Classes flows drew and found they could not send, by why, with how many flows did."""
    envelope: dict[str, EnvelopeRow] = field(default_factory=dict)

    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == RecordType.ROUND:
            self.add_round(record)
        elif kind == RecordType.FLOW:
            self.add_flow(record)
        elif kind == RecordType.REJECTION:
            self.logged.setdefault(str(record["replica"]), []).append((float(record["t"]), str(record["reason"])))

    def add_round(self, record: Mapping[str, Any]) -> None:
        """`add` for a `round` record (`harness.folding.read` routes each kind straight to its own)."""
        if record.get("outcome") == _INVALID_STATE:
            end = float(record["t"])
            self.rejected_rounds[(str(record.get("flow_id")), int(record.get("round") or 0))] = (
                end - float(record.get("latency") or 0.0), end, str(record.get("replica")))

    def add_flow(self, record: Mapping[str, Any]) -> None:
        """`add` for a flow's outcome (`flow` record)."""
        if isinstance(record.get("mutation_skipped"), str):
            self.skipped_at_run.setdefault(record["mutation_skipped"], Counter())[
                str(record.get("mutation_skipped_why"))] += 1
        if isinstance(record.get("envelope_mutation"), str):
            row = self.envelope.setdefault(record["envelope_mutation"], EnvelopeRow(record["envelope_mutation"]))
            row.counts["sent"] += 1
            row.counts[str(record.get("envelope_answer"))] += 1
            if record.get("envelope_got") is not None:
                row.got[str(record["envelope_got"])] += 1
        if record.get("mutation") is not None:
            self.mutants.append({key: record.get(key) for key in ("flow_id", "mutation", "mutant_answer",
                                                                  "mutant_round", "mutant_length", "mutant_detail")})

    def table(self, scenario: Scenario | None = None) -> FuzzTable:
        rows: dict[str, MutationRow] = {}
        for mutant in self.mutants:
            row = rows.setdefault(str(mutant["mutation"]), MutationRow(str(mutant["mutation"])))
            answer = str(mutant.get("mutant_answer"))
            row.counts["sent"] += 1
            row.counts[answer] += 1
            if answer in FINDINGS and len(row.findings) < EXAMPLES:
                row.findings.append(f"{mutant['flow_id']} {answer} ({mutant.get('mutant_detail')}, "
                                    f"{mutant.get('mutant_length')} characters)")
        self._reasons(rows)
        order = {mutation.value: index for index, mutation in enumerate(Mutation)}
        skipped = _skipped(scenario.flows if scenario is not None else [],
                           scenario is not None and scenario.target.sends_principal)
        for mutation, whys in self.skipped_at_run.items():
            skipped[mutation] = "; ".join(f"{why} ({count} flow{'s' * (count != 1)} drew it)"
                                          for why, count in sorted(whys.items()))
        envelope_order = {mutation.value: index for index, mutation in enumerate(EnvelopeMutation)}
        return FuzzTable(sorted(rows.values(), key=lambda row: order.get(row.mutation, len(order))), skipped,
                         sorted(self.envelope.values(),
                                key=lambda row: envelope_order.get(row.mutation, len(envelope_order))))

    def _reasons(self, rows: dict[str, MutationRow]) -> None:
        """Pair each rejected mutant with a free logged line on its replica, in three passes (see the module)."""
        lines = {replica: sorted(found) for replica, found in self.logged.items()}
        taken: dict[str, set[int]] = {replica: set() for replica in lines}
        waiting = []
        for mutant in self.mutants:
            window = self.rejected_rounds.get((str(mutant["flow_id"]), int(mutant.get("mutant_round") or 0)))
            if mutant.get("mutant_answer") == MutantAnswer.REJECTED and window is not None:
                waiting.append((window, str(mutant["mutation"])))
        waiting.sort(key=lambda item: item[0][1])
        # 1. a line with an expected reason inside the round, the mutants with fewest such lines first
        #    (so one that can take only this line gets it); 2. any line inside the round; 3. with slack.
        waiting.sort(key=lambda item: len(_inside(lines, item[0], 0.0, 0.0, _expected(item[1]))))
        for passes in ((0.0, 0.0, True), (0.0, 0.0, False), (SLACK_BEFORE, SLACK_AFTER, False)):
            before, after, expected_only = passes
            left = []
            for window, mutation in waiting:
                wanted = _expected(mutation) if expected_only else None
                free = [index for index in _inside(lines, window, before, after, wanted)
                        if index not in taken[window[2]]]
                if free:
                    taken[window[2]].add(free[0])
                    rows[mutation].reasons[lines[window[2]][free[0]][1]] += 1
                else:
                    left.append((window, mutation))
            waiting = left
        for _, mutation in waiting:
            rows[mutation].reasons["unlogged"] += 1


def _inside(lines: dict[str, list[tuple[float, str]]], window: tuple[float, float, str], before: float,
            after: float, reasons: frozenset[str] | None) -> list[int]:
    """Indexes of the lines on the window's replica inside it (widened by before/after), of `reasons` if given."""
    start, end, replica = window
    found = lines.get(replica, [])
    inside = []
    for index in range(bisect_left(found, (start - before - _STAMP, "")), len(found)):
        if found[index][0] > end + after + _STAMP:
            break
        if reasons is None or found[index][1] in reasons:
            inside.append(index)
    return inside


def _expected(mutation: str) -> frozenset[str]:
    known = Mutation._value2member_map_.get(mutation)
    return EXPECTED_REASONS.get(Mutation(mutation), frozenset()) if known else frozenset()


def _skipped(flows: Sequence[Any], principal: bool) -> dict[str, str]:
    """The classes a scenario's fuzz flows chose but none of them can send, each with why."""
    fuzz_flows = [flow for flow in flows if isinstance(flow, FuzzFlow)]
    runnable = {mutation for flow in fuzz_flows for mutation in flow.runnable(principal)}
    return {mutation.value: why for flow in fuzz_flows for mutation, why in flow.skipped(principal).items()
            if mutation not in runnable}
