"""The checks when the load has ended: reconciliation and the invariants, each journaled and counted in the metrics.

Both are asked of the live fold, which has folded every record written before the question.
The invariants read the ledger the target supplies (`Target.ledger_check`); a target with
none leaves the ledger invariants unchecked, and one whose ledger cannot be read fails
`ledger_readable`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.journal.records import InvariantChecked, RecordType
from harness.journal.writer import Journal
from harness.metrics.registry import RunMetrics
from harness.run.live_fold.client import FoldProcess
from harness.run.live_fold.protocol import Invariants, Reconcile, TracedReasons
from harness.targets.ledger_check import LedgerCheck, LedgerRead

if TYPE_CHECKING:
    from harness.telemetry.run_span import RunSpans


def reconcile(fold: FoldProcess, replicas: Sequence[str], journal: Journal, run_metrics: RunMetrics,
              spans: RunSpans | None = None) -> None:
    """Match every client -32602 to a logged line, from the journal as written (every part); with `spans`, each
    matched round that was traced gets its reason as a span under the round's own."""
    record = fold.ask(Reconcile(tuple(replicas)))
    journal.write(record)
    run_metrics.unexplained.inc(record["unexplained"])
    run_metrics.unmatched_logged.inc(record["unmatched_logged"])
    if spans is not None and record["matched"]:
        for traced in fold.ask(TracedReasons(tuple(replicas))):
            spans.reconciled(traced.trace_id, traced.span_id, traced.reason, traced.replica, traced.t)


def check_invariants(fold: FoldProcess, ledger: LedgerCheck | None, journal: Journal, run_metrics: RunMetrics) -> None:
    """Every invariant, on this run's flows and the ledger rows of the quotes they created."""
    read = ledger.read() if ledger is not None else LedgerRead(None)
    for result in fold.ask(Invariants(read.refunds, read.error)):
        journal.write(InvariantChecked(type=RecordType.INVARIANT, t=time.time(), invariant=result.name,
                                       checked=result.checked, violations=result.violations, detail=result.examples))
        if result.violations:
            run_metrics.invariant_violations.labels(invariant=result.name).inc(result.violations)
