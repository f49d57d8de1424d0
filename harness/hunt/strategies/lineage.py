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
declared ones. Where a fault on a replica's process (`on_the_process`: it ends its life or
freezes it) spared a replica's hand-overs, its declared cut did not happen there, and what is left
to ask is what the process remembers of what was done to it, which no hand-over shows: before any
other set, a `Probe` per trial asks it of every allowed replica (they run one server), in groups a
step names at once (group testing: the shrink then finds the replica) (`all_probes`): a freeze at
its longest alone and each ordered pair of life-ending faults, in groups holding every replica;
then a life-ending fault and a freeze at its longest, and a freeze and then a life-ending fault (the
freeze stretched, then sharing the trial evenly: `freeze_before_life`), in groups holding each pair of
replicas; last, two freezes in a row, in groups holding every replica.
Trial 1 of a hunt with no passing trial yet (no controls) is one random draw, as is any trial with
no completed flow seen so far.

When no such set and no such probe is left, the strategy raises `Exhausted` with a certificate: no
untried combination of at most `max_steps` of these faults cuts every observed support of the flow
class, within these bounds, by the declared cuts and the observed ones, with how far the replicas'
processes were probed. What it claims and what it does not is said in docs/hunt.md.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.config.chaos import CHAOS_ACTIONS, ChaosStep, EdgeKind, touches
from harness.config.fields import model_facts
from harness.hunt.draw import LATEST, SHORTEST, Space, draw_schedule, draw_step, window_at_longest
from harness.hunt.lineage import Edge, Shape, Support, TrialLineage, Window, trial_lineage
from harness.hunt.model import Schedule, chaos_step, step_table
from harness.hunt.shrink import MILDER
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


@dataclass(frozen=True, order=True)
class Probe:
    """Faults on the same replicas' processes, in this order (one or two): a probe of what a process remembers of what
    was done to it (its lives, its freezes), which no hand-over shows. A freeze in a probe is at its longest, but for
    a freeze before a life's end, which shares the trial with the life after it: `stretched` gives the freeze the most
    of the trial a life's end can still follow (`freeze_before_life`); otherwise the two share it evenly."""

    faults: tuple[Fault, ...]
    stretched: bool = False

    def __str__(self) -> str:
        return " then ".join(map(str, self.faults))


GAP = 1.0
"""Seconds between the two steps of a `Probe`: the second acts on the life (or the thaw) the first began."""
THAW = 0.2
"""Seconds between the end of a probe's first freeze and its second step: the process runs again and notices the gap
(a step taken while it is still frozen would meet a process that never saw its freeze end)."""


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


def freeze_before_life(duration: float, stretched: bool) -> tuple[float, float]:
    """A probe's freeze before a life's end, from the trial's start: how long it lasts, and when the life's end comes
    (`THAW` after it). Even: the second step at half the trial, so half the load meets the life it begins. Stretched:
    at the latest a step starts, so the freeze is as long as a freeze followed by a life's end can be in the trial (a
    fault that needs a longer freeze first needs a longer trial); the life it begins meets what load is left."""
    second_at = round(duration * LATEST if stretched else duration / 2, 1)
    second_at = max(second_at, SHORTEST + THAW)
    return round(second_at - THAW, 1), second_at


def seen_cutting(faults: FaultSet, supports: frozenset[frozenset[Shape]], observed: Observed) -> int:
    """How many of the supports the faults were seen cutting (a hand-over of one of its shapes failed while one of
    them ran): among the smallest untried sets, those whose observed effects cover the most supports go first."""
    return sum(1 for support in supports if any((fault, shape) in observed for fault in faults for shape in support))


def ends_a_life(action: str) -> bool:
    """Whether the action ends a replica's process, so a new one starts: it declares it cuts what the process held
    in memory (`record`), and acts on replicas."""
    model = CHAOS_ACTIONS[action]
    return "record" in model.cuts and model.acts_on != "auth" and action != "command"


def freezes(action: str) -> bool:
    """Whether the action freezes a replica's process for a window and lets it go on (its model says so)."""
    return CHAOS_ACTIONS[action].freezes


def on_the_process(action: str) -> bool:
    """Whether the action acts on a replica's process itself: ends its life or freezes it."""
    return ends_a_life(action) or freezes(action)


def probes_with(action: str) -> bool:
    """Whether probes of a process's memory use the action: it acts on the process, on a group of replicas at once
    (`several`), and changes nothing else (no replica knob it turns: a new TTL or name would be another question)."""
    model = CHAOS_ACTIONS[action]
    return on_the_process(action) and model.several and model.turns is None


def _harshness(action: str) -> tuple[bool, int, str]:
    """The order probes take process actions in, harsher first: life-ending ones before freezes, and among them one
    the shrink would make milder (a kill, milder as a restart) first."""
    return freezes(action), -len(MILDER.get((action, "action"), ())), action


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
    untried probes of the memory of those replicas' processes (`Probe`)."""

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
        probes = self.untried_probes(history, evidence, observed)
        if probes:
            return self.probe_schedule(probes[0], observed, rng)
        searches = [cutting_sets(flow, frozenset(support.shapes() for support in flows), self.faults(),
                                 self.space.max_steps, evidence.refuted, evidence.cut)
                    for flow, flows in sorted(by_flow.items())]
        untried = [(len(faults), flow_search.flow, faults) for flow_search in searches for faults in flow_search.sets
                   if faults not in tried]
        if not untried:
            if any(not flow_search.complete for flow_search in searches):
                return draw_schedule(self.space, self.seed, index)  # too many to enumerate: no certificate
            raise Exhausted(self.certificate(searches, observed, tried, self.probes_run(history, evidence, observed)))
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

    def all_probes(self, evidence: Evidence, observed: list[tuple[list[Support], float]]) -> list[Probe]:
        """Every probe worth a trial, in the order they run, once a fault on a replica's process (`on_the_process`)
        spared a hand-over of it: its declared cut did not happen there, and the replicas run the same server, so
        every allowed replica is probed, in groups every process action can name at once (group testing: the shrink
        then finds the replica), each group in turn, those whose hand-overs most observed supports went through
        first. First what a process remembers of its own history, in the fewest groups that hold every replica: a
        freeze at its longest alone, then each ordered pair of life-ending faults, the harsher first (`_harshness`:
        a kill then a kill, then a restart; then a restart then each). Then what it remembers of a peer's, in the
        fewest groups that hold each pair of replicas together: a life-ending fault then a freeze at its longest,
        then a freeze then a life-ending fault, first with the freeze stretched (`freeze_before_life`: the harsher),
        then the two sharing the trial evenly. Last, in the groups that hold every replica, two freezes in a row."""
        actions = sorted((action for action in self.space.actions if probes_with(action)), key=_harshness)
        if not actions or not any(on_the_process(fault.action) for fault, _ in evidence.refuted):
            return []
        through = {label: sum(1 for supports, _ in observed for support in supports
                              if any(label in (edge.minter, edge.verifier) for edge in support.edges))
                   for label in self.labels}
        lives = [action for action in actions if ends_a_life(action)]
        frozen = [action for action in actions if freezes(action)]
        two = self.space.max_steps >= 2
        stretches = freeze_before_life(self.space.duration, True)[0] > freeze_before_life(self.space.duration, False)[0]
        Kinds = list[list[tuple[tuple[str, ...], bool]]]
        own: Kinds = [[((action,), False) for action in frozen]]
        own += [[((first, second), False) for first in lives for second in lives]] * two
        peers: Kinds = [[((first, second), False) for first in lives for second in frozen]] * two
        for stretched in (True, False)[1 - stretches:]:
            peers += [[((first, second), stretched) for first in frozen for second in lives]] * two
        last: Kinds = [[((first, second), False) for first in frozen for second in frozen]] * two
        probes: list[Probe] = []
        for kinds, together in ([(kind, False) for kind in own] + [(kind, True) for kind in peers]
                                + [(kind, False) for kind in last]):
            groups = sorted(self.groups(actions, together),
                            key=lambda group: (-sum(through[label] for label in group), sorted(group)))
            probes += [Probe(tuple(Fault(action, self.naming(action, group)) for action in kind), stretched)
                       for kind, stretched in kinds for group in groups]
        allowed = set(self.faults())
        return [probe for probe in dict.fromkeys(probes) if set(probe.faults) <= allowed]

    def groups(self, actions: Sequence[str], together: bool) -> list[frozenset[str]]:
        """The fewest sets of allowed replicas, each one every action can name, that hold every replica (`together`:
        each pair of them together), greedily; a replica no such set holds is a group of its own."""
        replicas = [self.labels[index - 1] for index in self.space.replicas]
        candidates = {self.touched(CHAOS_ACTIONS[actions[0]].whom(choice, self.labels))
                      for choice in self.space.replica_choices(actions[0])}
        candidates = {group for group in candidates if group and all(self.naming(action, group) for action in actions)}
        apart = {frozenset(pair) for pair in itertools.combinations(replicas, 2)} if together else {
            frozenset({label}) for label in replicas}
        chosen: list[frozenset[str]] = []
        while apart:
            best = max(sorted(candidates, key=sorted), key=lambda group: (sum(part <= group for part in apart),
                                                                          len(group)))
            if not any(part <= best for part in apart):
                break
            chosen.append(best)
            apart = {part for part in apart if not part <= best}
        held = set().union(*chosen) if chosen else set()
        return chosen + [frozenset({label}) for label in replicas if label not in held
                         and all(self.naming(action, frozenset({label})) for action in actions)]

    def naming(self, action: str, labels: frozenset[str]) -> str:
        """Whom a step of `action` acts on when it names exactly these replicas ("" when none of its choices does)."""
        for choice in self.space.replica_choices(action):
            whom = CHAOS_ACTIONS[action].whom(choice, self.labels)
            if self.touched(whom) == labels:
                return whom
        return ""

    def touched(self, whom: str) -> frozenset[str]:
        """The replicas a step acting on `whom` acts on."""
        return frozenset(label for label in self.labels if touches(whom, label))

    def probes_run(self, history: Sequence[Tried], evidence: Evidence,
                   observed: list[tuple[list[Support], float]]) -> dict[Probe, bool]:
        """The probes of `all_probes` a search trial ran, and whether a trial of it held
        (False: every one was not judged), in the order they ran (the order `all_probes` gives its groups follows what
        the trials showed, so it can change after they ran)."""
        probes = set(self.all_probes(evidence, observed))
        return {sequence: held for sequence, held in self.sequences_run(history).items() if sequence in probes}

    def untried_probes(self, history: Sequence[Tried], evidence: Evidence,
                       observed: list[tuple[list[Support], float]]) -> list[Probe]:
        """The probes of `all_probes` not run yet, in its order."""
        ran = self.sequences_run(history)
        return [probe for probe in self.all_probes(evidence, observed) if probe not in ran]

    def sequences_run(self, history: Sequence[Tried]) -> dict[Probe, bool]:
        """Each search trial as a probe (`as_probe`), and whether a trial of it held."""
        ran: dict[Probe, bool] = {}
        for run in history:
            if run.trial.purpose == "search":
                probe = self.as_probe(run.trial.schedule)
                ran[probe] = ran.get(probe, False) or run.record.get("outcome") == "held"
        return ran

    def as_probe(self, schedule: Schedule) -> Probe:
        """A schedule's faults in the order its steps start, stretched when a freeze first gives its second step a
        start later than the even form's."""
        faults = self.sequence(schedule)
        steps = sorted(schedule.steps, key=lambda step: step.at)
        stretched = (len(steps) > 1 and freezes(steps[0].action)
                     and steps[1].at > freeze_before_life(self.space.duration, False)[1] + 0.05)
        return Probe(faults, stretched)

    def sequence(self, schedule: Schedule) -> tuple[Fault, ...]:
        """A schedule's faults in the order its steps start."""
        return tuple(Fault(step.action, step.journal_target(self.labels))
                     for step in sorted(schedule.steps, key=lambda step: step.at))

    def probe_schedule(self, probe: Probe, observed: list[tuple[list[Support], float]],
                       rng: random.Random) -> Schedule:
        """The probe as steps, within the trial. One that starts with a freeze and goes on: the freeze from the start,
        its second step `THAW` after it ends, at half the trial or, stretched, at the latest a step starts
        (`freeze_before_life`). One that ends in a freeze starts at once, so the freeze has the most of the trial (a
        pair's freeze `GAP` after the fault before it, at its longest). A pair of life-ending faults starts at the first
        quarter of the hand-overs through its replicas (in the passing trials, latest first), with states minted
        before it and verified after, but no later than half the trial less `GAP`: its second step, `GAP` later,
        begins the life the probe asks about, and at least half the trial's load must meet that life (a pair at the
        hand-overs' quarter of a short trial left under a second of load after it)."""
        latest = self.space.duration * LATEST
        scale = observed[-1][1]
        faults = probe.faults
        if len(faults) > 1 and freezes(faults[0].action):
            freeze, second_at = freeze_before_life(self.space.duration, probe.stretched)
            return Schedule(steps=(self.step(faults[0], [], scale, rng, at=0.0, window=freeze),
                                   self.step(faults[1], [], scale, rng, at=second_at, longest=True)),
                            duration=self.space.duration)
        if freezes(faults[-1].action):
            first_at = 0.0
        else:
            edges = [edge for supports, _ in reversed(observed) for support in supports for edge in support.edges
                     if any(touches(faults[0].whom, label) for label in (edge.minter, edge.verifier))]
            middles = sorted((edge.minted + edge.verified) / 2 for edge in edges) or [self.space.duration / 3]
            first_at = min(middles[len(middles) // 4], max(self.space.duration / 2 - GAP, 0.0))
        steps = [self.step(faults[0], [], scale, rng, at=first_at, longest=True)]
        for fault in faults[1:]:
            steps.append(self.step(fault, [], scale, rng, at=min(steps[-1].at + GAP, latest), longest=True))
        return Schedule(steps=tuple(steps), duration=self.space.duration)

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
             at: float | None = None, longest: bool = False, window: float | None = None) -> ChaosStep:
        """The fault as a step: drawn on whom it names, then timed on the edges it cuts (started at their median
        hand-over, or `at`, its window within the trial; a new TTL below their median age). `longest`: its windows
        as long as the draw makes them, within the trial; `window`: that long."""
        step = self._drawn(fault, rng)
        table: dict[str, Any] = step_table(step)
        if at is not None:
            table["at"] = round(min(max(at, 0.0), self.space.duration * LATEST), 1)
        for name, facts in model_facts(type(step)).items():
            if facts.window and window is not None:
                table[name] = round(max(window, SHORTEST), 1)
            elif facts.window and longest:
                table[name] = window_at_longest(facts, self.space.duration - table["at"])
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
                    tried: dict[FaultSet, bool], probes: dict[Probe, bool]) -> str:
        """What the search covered, as a proof sketch: per flow class, the hand-overs seen and the cutting sets run;
        what it rests on (the declared cuts and the observed ones) and how far the memory of a replica's process
        was probed."""
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
                "hand-over, or a hand-over seen outliving one), each per action and whom it acts on, no more: a fault "
                "neither describes, or the same one at another timing or with other parameters, is not ruled out. "
                + _probes_said(probes, self.space.duration))


def _probes_said(probes: dict[Probe, bool], duration: float) -> str:
    """How far the certificate probed the memory of a replica's process, in a sentence, with the longest freeze a
    probe gave before a life's end (a fault that needs a longer one is not ruled out)."""
    if not probes:
        return ("What a replica's process remembers of what was done to it (a fault that acts only after a restart "
                "and a kill of it, say) was not probed: it is not ruled out")
    said = [str(probe) + (" at its longest" if len(probe.faults) == 1 else "")
            + (" (the freeze stretched)" if probe.stretched else "") for probe in probes]
    unjudged = sum(1 for held in probes.values() if not held)
    together = any(not _one_replica(fault.whom) for probe in probes for fault in probe.faults)
    before_life = [freeze_before_life(duration, probe.stretched)[0] for probe in probes
                   if len(probe.faults) > 1 and freezes(probe.faults[0].action)]
    return (f"What a replica's process remembers of what was done to it was probed by {len(probes)} "
            f"probe{'s' * (len(probes) != 1)} ({_few(said)}), each run once"
            + (f" ({unjudged} only in trials not judged, which prove nothing)" if unjudged else "")
            + ", once a fault on a replica's process was seen sparing its hand-overs"
            + (", on several replicas at once (a fault that needs them treated apart is not ruled out)"
               if together else "")
            + (f"; the longest freeze before a life's end was {max(before_life):g}s: a fault that needs a longer one, "
               "and three or more faults in a row, are not ruled out" if before_life
               else ": three or more faults in a row are not ruled out"))


def _one_replica(whom: str) -> bool:
    return whom != "all" and "+" not in whom


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
