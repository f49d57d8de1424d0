"""The journal records a verdict needs beyond the figures: invariants, reconciliation, hypothesis probes, the end.

`RunChecks` reads them in the same pass as `RunFigures` (`harness.folding.read.JournalRead`),
so the journal stays the only source of every verdict, live or rebuilt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.folding.figures import RunFigures
from harness.folding.invariants import InvariantResult
from harness.journal.records import RecordType, RunEvent
from harness.journal.writer import JournalView


@dataclass(frozen=True)
class Reconciliation:
    """Every -32602 a client saw matched to a line a replica logged.

    `unexplained` (client rejections no line explains) fails the run; `unmatched_logged`
    (lines no client rejection of this run explains: other clients) is reported and can be
    given a threshold.
    """

    client_rejections: int
    logged: int | None
    unexplained: int
    matched: int | None = None
    unmatched_logged: int | None = None
    examples: dict[str, list[str]] = field(default_factory=dict)
    from_redispatched_rounds: int = 0
    """Client rejections of rounds re-dispatched from a replica that was down: the state of one replica
    arriving at another (an `unknown key` there during a restart is that, not a key problem of its own)."""
    settled_early: int = 0
    """Unmatched items counted before their partner could have come (the matching held its bound)."""
    not_judged: int = 0
    """Client rejections where their replica's log was unobserved (a log source lost): neither explained nor not."""
    unobserved: list[dict[str, Any]] = field(default_factory=list)
    """Each lost log source: `replica`, `from` (when it was lost), `why`."""
    no_adapter: int = 0
    """Of `unexplained`: on replicas whose log gave no line the run's reason adapter reads ("unexplained (no adapter
    for this server)"); unexplained all the same for the verdict."""
    unasked: dict[str, Any] | None = None
    """The -32021 refusals the clients saw, matched to the lines replicas logged for them (`client`, `logged`,
    `matched`, `unexplained`, `not_judged`, `examples`); informational, never part of `passed`. None: no -32021."""

    @property
    def passed(self) -> bool:
        return self.unexplained == 0

    @property
    def judged(self) -> bool:
        """Every client rejection was judged: none fell where a replica's log was unobserved."""
        return self.not_judged == 0

    def as_dict(self) -> dict[str, Any]:
        return {"client_rejections": self.client_rejections, "logged": self.logged, "matched": self.matched,
                "unexplained": self.unexplained, "no_adapter": self.no_adapter,
                "unmatched_logged": self.unmatched_logged,
                "from_redispatched_rounds": self.from_redispatched_rounds, "settled_early": self.settled_early,
                "not_judged": self.not_judged, "unobserved": self.unobserved, "judged": self.judged,
                "examples": self.examples, "passed": self.passed,
                **({"unasked": self.unasked} if self.unasked is not None else {})}


@dataclass(frozen=True)
class HypothesisResult:
    """One probe of the steady-state hypothesis; `before` failing means chaos never had a fair start."""

    phase: str
    ok: bool
    detail: Any = None
    t: float | None = None
    window: dict[str, float] | None = None
    """The flows it judged: those that ended `from` .. `to` seconds into the run (None in older journals)."""

    @property
    def judged(self) -> bool:
        """Every condition judged (journals written before a probe said so count theirs as judged)."""
        return not (isinstance(self.detail, list) and any(
            isinstance(item, Mapping) and item.get("judged") is False for item in self.detail))

    @property
    def failed_judged(self) -> bool:
        """A condition it judged did not hold (beside any it could not judge)."""
        return isinstance(self.detail, list) and any(
            isinstance(item, Mapping) and item.get("judged") is not False and item.get("passed") is False
            for item in self.detail)

    @property
    def mark(self) -> bool | None:
        """What the probe's line shows: held, failed, or held with a condition not judged (None)."""
        return None if self.ok and not self.judged else self.ok

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "ok": self.ok, "judged": self.judged, "detail": self.detail, "t": self.t,
                "window": self.window}


@dataclass
class RunChecks(JournalView):
    """The journal records a verdict needs that `RunFigures` does not keep.

    `RunFigures` keeps invariant counts and the last reconciliation numbers, but not the
    invariants' examples, the `logged` count, the hypothesis probes, the run id, the table it
    judged or why the run ended; reading them here, from the same records, keeps the journal the only source.
    """

    run_id: str | None = None
    judged: str | None = None
    """The table the run judged, as its start record says (`expect`, `reproduces`); None: a journal without it."""
    invariants: dict[str, InvariantResult] = field(default_factory=dict)
    hypothesis: list[HypothesisResult] = field(default_factory=list)
    reconciliation: Reconciliation | None = None
    ended: bool = False
    end_status: str | None = None
    end_reason: str | None = None
    target_error: str | None = None
    load_started: bool = False
    """Whether the load began (a `run load-started` record): a target error before it means nothing was measured."""
    harness_error: str | None = None
    """The first `run error`: the harness's own failure (exit 4)."""
    cpu: dict[str, Any] | None = None
    log_sources: list[dict[str, Any]] = field(default_factory=list)
    """What each log source read (the `logs` record): lines, bad lines skipped, cut lines, when it was lost."""

    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        if kind == RecordType.INVARIANT:
            self._invariant(record)
        elif kind == RecordType.HYPOTHESIS:
            window = record.get("window")
            self.hypothesis.append(HypothesisResult(str(record.get("phase")), bool(record.get("ok")),
                                                    record.get("detail"), record.get("t"),
                                                    dict(window) if isinstance(window, Mapping) else None))
        elif kind == RecordType.RECONCILIATION:
            self.reconciliation = Reconciliation(int(record.get("client_rejections", 0)),
                                                 _int_or_none(record.get("logged")),
                                                 int(record.get("unexplained", 0)),
                                                 _int_or_none(record.get("matched")),
                                                 _int_or_none(record.get("unmatched_logged")),
                                                 dict(record.get("examples") or {}),
                                                 settled_early=int(record.get("settled_early") or 0),
                                                 not_judged=int(record.get("not_judged") or 0),
                                                 unobserved=_unobserved(record.get("unobserved")),
                                                 no_adapter=int(record.get("no_adapter") or 0),
                                                 unasked=_unasked(record.get("unasked")))
        elif kind == RecordType.RUN:
            self._run_event(record)

    def _run_event(self, record: Mapping[str, Any]) -> None:
        event = record.get("event")
        if event == RunEvent.START:
            self.run_id = self.run_id or record.get("run_id")
            self.judged = self.judged or record.get("judged")
        elif event == RunEvent.LOAD_STARTED:
            self.load_started = True
        elif event == RunEvent.ERROR:
            self.harness_error = self.harness_error or str(record.get("error"))
        elif event == RunEvent.LOGS:
            self.log_sources = [dict(source) for source in record.get("sources") or () if isinstance(source, Mapping)]
        elif event == RunEvent.CPU:
            self.cpu = {key: value for key, value in record.items() if key not in ("type", "event", "t")}
        elif event == RunEvent.END:
            self.ended = True
            self.end_status = record.get("status")
            self.end_reason = record.get("reason") or record.get("detail")
            self.target_error = record.get("target_error") or self.target_error

    def _invariant(self, record: Mapping[str, Any]) -> None:
        """Counts add up (as `RunFigures.violations` does); the latest examples that exist are kept."""
        name = str(record.get("invariant"))
        before = self.invariants.get(name)
        violations = int(record.get("violations", 0)) + (before.violations if before else 0)
        examples = _examples(record.get("detail")) or (before.examples if before else [])
        checked = bool(record.get("checked", True)) or (before is not None and before.checked)
        self.invariants[name] = InvariantResult(name, violations, examples, checked)

    @classmethod
    def from_figures(cls, figures: RunFigures) -> RunChecks:
        """What can be said from the figures alone (no examples, no hypothesis), for callers without records."""
        return cls(invariants={name: InvariantResult(name, count) for name, count in figures.violations.items()},
                   reconciliation=Reconciliation(figures.client_rejections, None, figures.unexplained),
                   ended=figures.status is not None, end_status=figures.status)


def _unasked(part: Any) -> dict[str, Any] | None:
    """A reconciliation record's `unasked` part, its counts as whole numbers and its examples as text (the journal is
    input); None when absent or not a table."""
    if not isinstance(part, Mapping):
        return None
    counts = {key: int(part.get(key) or 0) for key in ("client", "logged", "matched", "unexplained", "not_judged")}
    examples = part.get("examples")
    return {**counts, "examples": [str(item) for item in examples] if isinstance(examples, list) else []}


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _examples(detail: Any) -> list[str]:
    """An invariant record's `detail` (its examples) as a list of lines, whatever an older or damaged journal holds."""
    if detail is None:
        return []
    if isinstance(detail, list | tuple):
        return [str(item) for item in detail]
    return [str(detail)]


def _unobserved(spans: Any) -> list[dict[str, Any]]:
    """A reconciliation record's `unobserved` spans, as data (the journal is input)."""
    if not isinstance(spans, list):
        return []
    return [{"replica": str(span.get("replica")), "from": span.get("from"), "why": str(span.get("why") or "")}
            for span in spans if isinstance(span, Mapping)]
