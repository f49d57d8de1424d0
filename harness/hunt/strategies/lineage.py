"""`lineage`: lineage-driven fault injection (Alvaro et al., SIGMOD 2015): cut what kept the flows alive.

Every passing trial's journal says how each completed flow got there (`harness.hunt.lineage`):
its support, the hand-overs of state between its rounds, each minted by one replica and verified
by the next round's. A flow class (refund, return, ...) has the distinct supports its completed
flows were seen with: a fault set can break the class only when it cuts at least one edge of
every one of them. A fault here is an action on whom it acts (`restart r2`, `network all`,
`revoke auth`), one of those the hunt's bounds allow; which edges it cuts is what its action
declares in the registry (`harness.config.chaos`, `cuts`), on the replicas it touches (a
crossing `r1->r2` depends on r1's and r2's keys, names and records, and on both rounds' answers
in flight; every round on the lead's token).

Each search trial runs the smallest set of at most `max_steps` faults not run yet that cuts every
known support of some class, and is minimal (no fault in it idle: without any one of them, some
support stands); of those, one whose faults were seen cutting the most supports (`seen_cutting`).
Each fault is timed on the edges it cuts, as the trial before saw them: it starts at their median
hand-over (a restart between the mint and the verification, a network
fault with the verification in its window), and a new TTL is set below their median age. Its
other parameters are drawn from the seed, as the random draw draws them. If the flows survive,
the trial's journal adds the supports that kept them alive (a round re-dispatched to another
replica, an answer lost and resent), and the next set must cut those too; a hand-over under way
while a fault ran on its minter or verifier, in a flow that completed, shows that fault does not
cut hand-overs of its shape (`refuted`), and no later set counts on it, unless a hand-over of that
shape failed while the fault ran on its replicas (`Evidence.cut`): observed cuts count before
declared ones. Where a life-ending fault (`ends_a_life`) spared a replica's hand-overs, its declared
cut did not happen there: before any other set, that replica's memory of its own lives is probed
by each ordered pair of life-ending faults on it (`Lives`: a restart then a kill of r2), one per
trial. Trial 1 of a hunt with no passing trial yet (no controls) is one random draw, as is any
trial with no completed flow seen so far.

When no such set and no such pair is left, the strategy raises `Exhausted` with a certificate: no
untried combination of at most `max_steps` of these faults cuts every observed support of the flow
class, within these bounds, by the declared cuts and the observed ones, with how far a replica's
lives were probed. What it claims and what it does not is said in docs/hunt.md.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.config.chaos import CHAOS_ACTIONS, ChaosStep, EdgeKind, touches
from harness.config.fields import model_facts
from harness.hunt.draw import LATEST, SHORTEST, Space, draw_schedule, draw_step
from harness.hunt.lineage import Edge, Shape, Support, TrialLineage, Window, trial_lineage
from harness.hunt.model import Schedule, chaos_step, step_table
from harness.hunt.strategy import Exhausted, Strategy, Tried, searched
from harness.load.seeding import stream

TRIES = 200
"""Draws of a fault's step until it acts on whom the fault names."""
MOST_NODES = 200_000
"""The most branches the search for cutting sets explores per flow class: past it, no certificate is given (the
sets found so far are still run)."""


@dataclass(frozen=True, order=True)
class Fault:
    """An action on whom it acts: a replica's label, `all` or `auth`."""

    action: str
    whom: str

    def __str__(self) -> str:
        return f"{self.action} {self.whom}"


FaultSet = frozenset[Fault]
Refuted = frozenset[tuple[Fault, Shape]]
"""Faults that did not cut hand-overs of a shape: one of that shape spanned the fault and its flow completed."""
Observed = frozenset[tuple[Fault, Shape]]
"""Faults seen cutting hand-overs of a shape: one of that shape spanned the fault and its verifying round failed."""
Lives = tuple[Fault, Fault]
"""Two faults that each end a life of the same replica, in this order: a probe of the replica's memory of its lives."""
GAP = 1.0
"""Seconds between the two steps of a `Lives` probe: the second acts on the life the first began."""


@dataclass(frozen=True)
class Evidence:
    """What the trials so far showed each fault do to the hand-overs it ran across (on a replica it touched, between
    the mint and the verifying round's answer): cut them (the verifying round failed), or spared them (it got
    through, and its flow completed). Observed, not declared: `cuts` counts it before what the action declares."""

    cut: Observed = frozenset()
    spared: Refuted = frozenset()

    @property
    def refuted(self) -> Refuted:
        """Spared and never seen cut: the fault, as it ran, does not cut that shape."""
        return self.spared - self.cut

    def acted(self) -> frozenset[Fault]:
        """The faults seen acting on a hand-over in flight, cutting it or not."""
        return frozenset(fault for fault, _ in self.cut | self.spared)


def seen_cutting(faults: FaultSet, supports: frozenset[frozenset[Shape]], observed: Observed) -> int:
    """How many of the supports the faults were seen cutting (a hand-over of one of its shapes failed while one of
    them ran): among the smallest untried sets, those whose observed effects cover the most supports go first."""
    return sum(1 for support in supports if any((fault, shape) in observed for fault in faults for shape in support))


def ends_a_life(action: str) -> bool:
    """Whether the action ends a replica's process, so a new one starts: it declares it cuts what the process held
    in memory (`record`), and acts on replicas."""
    model = CHAOS_ACTIONS[action]
    return "record" in model.cuts and model.acts_on != "auth" and action != "command"


def cuts(fault: Fault, shape: Shape, refuted: Refuted = frozenset(), observed: Observed = frozenset()) -> bool:
    """Whether the fault can cut an edge of this shape: seen cutting one (`observed`), else what its action declares
    it cuts, on whom it touches, unless a hand-over of that shape outlived it (`refuted`)."""
    if (fault, shape) in observed:
        return True
    if (fault, shape) in refuted:
        return False
    kinds: frozenset[EdgeKind] = CHAOS_ACTIONS[fault.action].cuts
    if fault.whom == "auth":
        return "token" in kinds  # every round carries the lead's token
    if not (touches(fault.whom, shape.minter) or touches(fault.whom, shape.verifier)):
        return False
    if kinds & {"answer", "key", "age", "audience"}:
        return True  # every hand-over travels twice, is sealed with a key, for a name, and ages
    return "record" in kinds and shape.crossed  # the once-only records another replica wrote


def cuts_all(faults: FaultSet, supports: frozenset[frozenset[Shape]], refuted: Refuted = frozenset(),
             observed: Observed = frozenset()) -> bool:
    return all(any(cuts(fault, shape, refuted, observed) for fault in faults for shape in support)
               for support in supports)


@dataclass(frozen=True)
class Search:
    """The cutting sets of one flow class: every minimal one of at most `most` faults, and whether that is all."""

    flow: str
    supports: frozenset[frozenset[Shape]]
    sets: tuple[FaultSet, ...]
    complete: bool
    refuted: int = 0
    """How many (fault, hand-over) pairs of this class's supports a completed flow refuted."""
    observed: int = 0
    """How many (fault, hand-over) pairs of this class's supports a fault was seen cutting."""


def cutting_sets(flow: str, supports: frozenset[frozenset[Shape]], faults: Sequence[Fault], most: int,
                 refuted: Refuted = frozenset(), observed: Observed = frozenset()) -> Search:
    """Every minimal set of at most `most` faults that cuts each support (a hitting set: branch on the faults that
    cut the first support still standing), smallest first. An empty support (a flow with no hand-over) is cut by
    nothing: no set."""
    found: set[FaultSet] = set()
    nodes = 0
    ordered = sorted(supports, key=lambda support: sorted(map(str, support)))

    def branch(chosen: FaultSet) -> None:
        nonlocal nodes
        nodes += 1
        standing = next((support for support in ordered
                         if not any(cuts(fault, shape, refuted, observed) for fault in chosen for shape in support)),
                        None)
        if standing is None:
            if all(not cuts_all(chosen - {fault}, supports, refuted, observed) for fault in chosen):
                found.add(chosen)
            return
        if len(chosen) >= most or nodes > MOST_NODES:
            return
        for fault in faults:
            if fault not in chosen and any(cuts(fault, shape, refuted, observed) for shape in standing):
                branch(chosen | {fault})

    branch(frozenset())
    shapes = {shape for support in supports for shape in support}
    return Search(flow, supports, tuple(sorted(found, key=lambda faults: (len(faults), sorted(faults)))),
                  nodes <= MOST_NODES, sum(1 for _, shape in refuted if shape in shapes),
                  sum(1 for _, shape in observed if shape in shapes))


class Lineage(Strategy):
    """Each trial the smallest untried fault set that cuts every support seen so far of a flow class, by the cuts
    declared and those observed; first, where a life-ending fault was seen to spare a replica's hand-overs, the
    untried pairs of life-ending faults on that replica (`Lives`)."""

    name = "lineage"

    def __init__(self, space: Space, seed: int, labels: Sequence[str]) -> None:
        super().__init__(space, seed, labels)
        self._read: dict[Path, tuple[TrialLineage, float]] = {}
        """Each passing trial's lineage and time scale, read once (a pure function of its folder)."""

    def faults(self) -> list[Fault]:
        """Every fault the hunt's bounds allow: each action on each whom it may name."""
        return sorted({Fault(action, CHAOS_ACTIONS[action].whom(replica, self.labels))
                       for action in self.space.actions for replica in self.space.replica_choices(action)})

    def next(self, history: Sequence[Tried]) -> Schedule:
        index = searched(history) + 1
        observed = self.observed(history)
        by_flow = _by_flow(observed)
        if not by_flow:
            return draw_schedule(self.space, self.seed, index)  # nothing seen yet to cut
        tried: dict[FaultSet, bool] = {}
        """Each fault set run so far, and whether a trial of it held (False: every one was not judged)."""
        for run in history:
            if run.trial.purpose != "control":
                faults = self.fault_set(run.trial.schedule)
                tried[faults] = tried.get(faults, False) or run.record.get("outcome") == "held"
        evidence = self.evidence(history)
        rng = stream(self.seed, "hunt", "lineage", index)
        lives = self.untried_lives(history, evidence, observed)
        if lives:
            return self.lives_schedule(lives[0], observed, rng)
        searches = [cutting_sets(flow, frozenset(support.shapes() for support in flows), self.faults(),
                                 self.space.max_steps, evidence.refuted, evidence.cut)
                    for flow, flows in sorted(by_flow.items())]
        untried = [(len(faults), flow_search.flow, faults) for flow_search in searches for faults in flow_search.sets
                   if faults not in tried]
        if not untried:
            if any(not flow_search.complete for flow_search in searches):
                return draw_schedule(self.space, self.seed, index)  # too many to enumerate: no certificate
            raise Exhausted(self.certificate(searches, observed, tried, self.lives_run(history, evidence, observed)))
        fewest = min(size for size, _, _ in untried)
        smallest = [item for item in untried if item[0] == fewest]
        covers = {item: seen_cutting(item[2], next(flow_search.supports for flow_search in searches
                                                   if flow_search.flow == item[1]), evidence.cut)
                  for item in smallest}
        most = max(covers.values())
        _, flow, chosen = rng.choice(sorted(item for item in smallest if covers[item] == most))
        edges = self.latest_edges(observed, flow)
        scale = observed[-1][1]
        steps = [self.step(fault, [edge for edge in edges if cuts(fault, edge.shape(), evidence.refuted,
                                                                      evidence.cut)], scale, rng)
                 for fault in sorted(chosen)]
        return Schedule(steps=tuple(sorted(steps, key=lambda step: step.at)), duration=self.space.duration)

    def observed(self, history: Sequence[Tried]) -> list[tuple[list[Support], float]]:
        """The supports (and time scale) of every passing trial so far, oldest first; trials with none left out."""
        seen = []
        for read, scale in self._passing(history):
            if read.supports:
                seen.append((list(read.supports), scale))
        return seen

    def evidence(self, history: Sequence[Tried]) -> Evidence:
        """What each fault a passing trial ran did to the hand-overs that spanned it on a replica it touched (or any,
        for the authorization server's): cut (the verifying round failed, in any flow) or spared (it got through, in a
        flow that completed)."""
        cut: set[tuple[Fault, Shape]] = set()
        spared: set[tuple[Fault, Shape]] = set()
        for read, _ in self._passing(history):
            for window in read.chaos:
                fault = Fault(window.action, window.whom)
                cut.update((fault, edge.shape()) for edge in read.cut if _across(window, edge))
                spared.update((fault, edge.shape()) for support in read.supports for edge in support.edges
                              if not edge.cut and _across(window, edge))
        return Evidence(frozenset(cut), frozenset(spared))

    def refuted(self, history: Sequence[Tried]) -> Refuted:
        """Each fault a passing trial ran, with each shape of hand-over that spanned it (on a replica it touched) in a
        flow that completed, and that no trial saw it cut: that fault, as it ran, did not cut that shape."""
        return self.evidence(history).refuted

    def all_lives(self, evidence: Evidence, observed: list[tuple[list[Support], float]]) -> list[Lives]:
        """Every pair of life-ending faults on one replica worth a trial: the replica's hand-overs outlived a
        life-ending fault on it (the declared cut did not happen), so what is left to ask is whether its memory of
        its lives does; replicas whose hand-overs most observed supports went through first, then by name."""
        if self.space.max_steps < 2:
            return []
        allowed = set(self.faults())
        probed = {label for fault, shape in evidence.refuted if ends_a_life(fault.action)
                  for label in (shape.minter, shape.verifier) if touches(fault.whom, label)}
        through = {label: sum(1 for supports, _ in observed for support in supports
                              if any(label in (edge.minter, edge.verifier) for edge in support.edges))
                   for label in probed}
        actions = sorted(action for action in self.space.actions if ends_a_life(action))
        return [(Fault(first, label), Fault(second, label))
                for label in sorted(probed, key=lambda label: (-through[label], label))
                for first in actions for second in actions
                if {Fault(first, label), Fault(second, label)} <= allowed]

    def lives_run(self, history: Sequence[Tried], evidence: Evidence,
                  observed: list[tuple[list[Support], float]]) -> dict[Lives, bool]:
        """The pairs of `all_lives` a search trial ran, its steps in that order, and whether a trial of it held
        (False: every one was not judged)."""
        ran: dict[tuple[Fault, ...], bool] = {}
        for run in history:
            if run.trial.purpose == "search":
                sequence = self.sequence(run.trial.schedule)
                ran[sequence] = ran.get(sequence, False) or run.record.get("outcome") == "held"
        return {lives: ran[lives] for lives in self.all_lives(evidence, observed) if lives in ran}

    def untried_lives(self, history: Sequence[Tried], evidence: Evidence,
                      observed: list[tuple[list[Support], float]]) -> list[Lives]:
        """The pairs of `all_lives` not run yet, those on the replica with the fewest run first (each replica's
        memory probed in turn), then in `all_lives`' order."""
        ran = self.lives_run(history, evidence, observed)
        per_replica = {lives[0].whom: sum(1 for done in ran if done[0].whom == lives[0].whom) for lives in ran}
        left = [lives for lives in self.all_lives(evidence, observed) if lives not in ran]
        order = {lives: number for number, lives in enumerate(left)}
        return sorted(left, key=lambda lives: (per_replica.get(lives[0].whom, 0), order[lives]))

    def sequence(self, schedule: Schedule) -> tuple[Fault, ...]:
        """A schedule's faults in the order its steps start."""
        return tuple(Fault(step.action, step.journal_target(self.labels))
                     for step in sorted(schedule.steps, key=lambda step: step.at))

    def lives_schedule(self, lives: Lives, observed: list[tuple[list[Support], float]],
                       rng: random.Random) -> Schedule:
        """The pair as two steps on its replica: the first at the first quarter of the hand-overs through it (in the
        passing trials, latest first), with states minted before it and verified after; the second `GAP` later, so
        that most of the trial's hand-overs meet the life it begins; both within the trial."""
        label = lives[0].whom
        edges = [edge for supports, _ in reversed(observed) for support in supports for edge in support.edges
                 if label in (edge.minter, edge.verifier)]
        middles = sorted((edge.minted + edge.verified) / 2 for edge in edges) or [self.space.duration / 3]
        latest = self.space.duration * LATEST
        first = min(middles[len(middles) // 4], max(latest - GAP, 0.0))
        second = min(first + GAP, latest)
        scale = observed[-1][1]
        steps = (self.step(lives[0], [], scale, rng, at=first), self.step(lives[1], [], scale, rng, at=second))
        return Schedule(steps=steps, duration=self.space.duration)

    def _passing(self, history: Sequence[Tried]) -> list[tuple[TrialLineage, float]]:
        """The lineage (and time scale) of every trial so far that held, oldest first."""
        passing = []
        for tried in history:
            if tried.record.get("outcome") != "held":
                continue
            if tried.folder not in self._read:
                self._read[tried.folder] = (trial_lineage(tried.folder), _time_scale(tried.folder))
            passing.append(self._read[tried.folder])
        return passing

    @staticmethod
    def latest_edges(observed: list[tuple[list[Support], float]], flow: str) -> list[Edge]:
        """The flow class's edges in the latest passing trial that saw any: when the faults are timed."""
        for supports, _ in reversed(observed):
            edges = [edge for support in supports if support.flow == flow for edge in support.edges]
            if edges:
                return edges
        return []

    def fault_set(self, schedule: Schedule) -> FaultSet:
        """The faults a schedule's steps are."""
        return frozenset(Fault(step.action, step.journal_target(self.labels))
                         for step in schedule.steps)

    def step(self, fault: Fault, edges: list[Edge], scale: float, rng: random.Random,
             at: float | None = None) -> ChaosStep:
        """The fault as a step: drawn on whom it names, then timed on the edges it cuts (started at their median
        hand-over, or `at`, its window within the trial; a new TTL below their median age)."""
        step = self._drawn(fault, rng)
        table: dict[str, Any] = step_table(step)
        if at is not None:
            table["at"] = round(min(max(at, 0.0), self.space.duration * LATEST), 1)
        if edges:
            middle = statistics.median((edge.minted + edge.verified) / 2 for edge in edges)
            if at is None:
                table["at"] = round(min(max(middle, 0.0), self.space.duration * LATEST), 1)
            if "ttl" in type(step).model_fields:
                age = statistics.median(edge.age for edge in edges) * scale  # modelled, as the TTL is
                table["ttl"] = round(max(min(age / 2, self.space.ttl * 0.9), SHORTEST), 1)
        left = max(self.space.duration - table["at"], SHORTEST)
        for name, facts in model_facts(type(step)).items():
            if facts.window and isinstance(table.get(name), int | float):
                table[name] = round(min(table[name], left), 1)
        return chaos_step(table)

    def _drawn(self, fault: Fault, rng: random.Random) -> ChaosStep:
        """A step of the fault's action drawn (parameters from the seed) until it acts on whom the fault names."""
        named = [replica for replica in self.space.replica_choices(fault.action)
                 if CHAOS_ACTIONS[fault.action].whom(replica, self.labels) == fault.whom]
        narrowed = replace(self.space, actions=(fault.action,))
        for _ in range(TRIES):
            step = draw_step(narrowed, rng)
            if step.journal_target(self.labels) == fault.whom:
                return step
        table = step_table(step)
        table.pop("replica", None)
        table.pop("replicas", None)
        if named and isinstance(named[0], tuple):
            table["replicas"] = list(named[0])
        elif named and named[0] is not None:
            table["replica"] = named[0]
        return chaos_step(table)

    def certificate(self, searches: list[Search], observed: list[tuple[list[Support], float]],
                    tried: dict[FaultSet, bool], lives: dict[Lives, bool]) -> str:
        """What the search covered, as a proof sketch: per flow class, the hand-overs seen and the cutting sets run;
        what it rests on (the declared cuts and the observed ones) and how far a replica's memory of its lives was
        probed."""
        said = []
        for flow_search in searches:
            flow = flow_search.flow
            if any(not support for support in flow_search.supports):
                why = f"a {flow} flow completed with no hand-over of state between rounds, which no fault here cuts"
            else:
                shapes = sorted({str(shape) for support in flow_search.supports for shape in support})
                sets = [" + ".join(map(str, sorted(faults))) for faults in flow_search.sets]
                unjudged = [" + ".join(map(str, sorted(faults))) for faults in flow_search.sets if not tried[faults]]
                cut = (f"are all cut only by {_few(sets, ' or ')}, each run, and {flow} flows completed" if sets
                       else "are all cut by no such combination")
                count = len(flow_search.supports)
                why = (f"its {count} observed support{'s' * (count != 1)}, over the hand-overs {_few(shapes)}, {cut}"
                       + (f"; {flow_search.observed} times a fault was seen cutting a hand-over of one of these shapes "
                          "(its verifying round failed), and that fault is taken to cut that shape"
                          if flow_search.observed else "")
                       + (f"; {flow_search.refuted} times a hand-over of one of these shapes spanned a fault on its "
                          "replicas and its flow completed, and that fault is taken not to cut that shape"
                          if flow_search.refuted else "")
                       + (f"; but {_few(unjudged, ', ')} ran only in trials not judged, which prove nothing"
                          if unjudged else ""))
            said.append(f"no untried combination of <= {self.space.max_steps} of these faults cuts every observed "
                        f"support of a {flow} flow, within these bounds: {why}")
        return (f"{'; '.join(said)}. The faults: {', '.join(map(str, self.faults()))}; the supports from "
                f"{len(observed)} passing trials of {self.space.duration:g}s. It rests on the cuts each action "
                "declares (harness.config.chaos `cuts`) and those these trials observed (a fault seen cutting a "
                "hand-over, or a hand-over seen outliving one), no more: a fault neither describes is not ruled out. "
                + _lives_said(lives))


def _lives_said(lives: dict[Lives, bool]) -> str:
    """How far the certificate probed a replica's memory of its own lives, in a sentence."""
    if not lives:
        return ("A replica's memory of its own lives (a fault that acts only after a restart and a kill of it, "
                "say) was not probed: it is not ruled out")
    pairs = [f"{first} then {second}" for first, second in lives]
    unjudged = sum(1 for held in lives.values() if not held)
    return (f"A replica's memory of its own lives was probed by {len(lives)} pair{'s' * (len(lives) != 1)} of "
            f"life-ending faults in a row on one replica ({_few(pairs)}), each run once"
            + (f" ({unjudged} only in trials not judged, which prove nothing)" if unjudged else "")
            + ", and only on replicas whose hand-overs outlived such a fault: three or more in a row, or faults on "
            "other replicas between, are not ruled out")


def _across(window: Window, edge: Edge) -> bool:
    """Whether the hand-over was under way during the fault, on a replica it touched (any, for the authorization
    server's: every round carries the lead's token)."""
    return ((window.whom == "auth" or touches(window.whom, edge.minter) or touches(window.whom, edge.verifier))
            and edge.spans(window.start, window.end))


def _few(items: list[str], joint: str = ", ", most: int = 6) -> str:
    """The first few items, and how many more."""
    shown = joint.join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _by_flow(observed: list[tuple[list[Support], float]]) -> dict[str, list[Support]]:
    flows: dict[str, list[Support]] = {}
    for supports, _ in observed:
        for support in supports:
            flows.setdefault(support.flow, []).append(support)
    return flows


def _time_scale(folder: Path) -> float:
    """The trial's time scale (modelled seconds per real second), from its scenario.json; 1 when it cannot say."""
    try:
        data = json.loads((folder / "scenario.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 1.0
    scale = data.get("time_scale") if isinstance(data, dict) else None
    return float(scale) if isinstance(scale, int | float) and not isinstance(scale, bool) and 1 <= scale < 1e9 \
        else 1.0
