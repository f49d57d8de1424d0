"""A failure's signature, read off a trial's summary: where it showed and what it looked like, beyond its kind and name.

"The same failure" decides what the shrink keeps and what a replay or a rerun counts, so a kind and
a name alone are too coarse: every unexplained rejection is named -32602, and one invariant broken
by a double release and by a lost one reads the same. Each failure carries what its trial's
summary.json says of it:

* unexplained rejections: the replicas the clients saw them on (read off the reconciliation's
  examples, `<flow> round <n> on <replica> at <clock>`; they have no logged reason, that is what
  makes them unexplained);
* an invariant: the shape of each break its examples show, ids and counts above one left out
  (`released N times`, `started 1 times, ended 0 times`, `completed, but is expired`), and the
  replicas where the breaks were observed, when the examples say (`(last round on r2)`: the replica
  that answered the flow's last round, `harness.folding.invariants.LAST_ROUND_ON`);
* an `[expect]` key on rejections: the reasons the replicas logged that it counted (a key that names a
  reason counts that one) and the replicas that logged them.

Each part is a sample (a summary keeps a few examples), so two failures are the same when their
kind and name agree and, for each part both of them state, they share at least one entry
(`harness.hunt.model.Failure.same_as`). The summary is read as untrusted data: each text is capped and made one
line, and a shape is at most `SHAPE_LIMIT` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from harness import foreign_text
from harness.config.thresholds import ThresholdError, parse_threshold
from harness.folding.invariants import LAST_ROUND_ON
from harness.hunt.model import Failure

UNEXPLAINED = "-32602"
"""The name of an `unexplained` failure: -32602 answers the clients saw that no replica's log line explains (they
have no logged reason: that is what makes them unexplained)."""
SHAPE_LIMIT = 120
"""Longest shape of one break, in characters."""
_MOST = 5
"""Entries of one part at most (a summary keeps 5 examples of each kind)."""
_LABEL = 64
_WHERE = re.compile(r" round \d+ on (\S{1,64}) at \S+\Z")
_OBSERVED_ON = re.compile(r"(?:\A|\s)" + re.escape(LAST_ROUND_ON.split("{")[0].lstrip()) + r"([^\s()]{1,64})\)\Z")
_ID = re.compile(r"(?=\S*\d)(?=\S*[A-Za-z_-])\S+")
"""A token holding a digit and a letter, `-` or `_`: a flow, quote or refund id, different in every run."""
_WRAPPED_ID = re.compile(r"\([^()]*\d[^()]*\)")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_SPACES = re.compile(r"\s+")
_DANGLING = re.compile(r"\s+([,:;)])|^[\s,:;]+|[\s,:;]+$")


def unexplained_failure(examples: Iterable[object]) -> Failure:
    """Unexplained rejections, with the replicas their examples say the clients saw them on."""
    return Failure("unexplained", UNEXPLAINED, replicas=_sorted(replica_of(example) for example in examples))


def replica_of(example: object) -> str | None:
    """The replica of an unexplained rejection's example (`<flow> round <n> on <replica> at <clock>`); None when the
    text is not one."""
    if not isinstance(example, str):
        return None
    match = _WHERE.search(example[:1000])
    if match is None or match[1] == "None":
        return None
    return foreign_text.line(match[1], _LABEL)


def invariant_failure(name: str, examples: Iterable[object]) -> Failure:
    """An invariant broken, with the shape of each break its examples show and the replicas they were observed on,
    when they say."""
    said = list(examples)
    return Failure("invariant", name, replicas=_sorted(observed_on(example) for example in said),
                   detail=_sorted(shape(_OBSERVED_ON.sub("", example) if isinstance(example, str) else example)
                                  for example in said))


def observed_on(example: object) -> str | None:
    """The replica an invariant's example says its break was observed on (`... (last round on r2)`); None when it
    says none."""
    if not isinstance(example, str):
        return None
    match = _OBSERVED_ON.search(example[-200:])
    return foreign_text.line(match[1], _LABEL) if match is not None else None


def shape(example: object) -> str:
    """One break with what differs between runs left out: ids (a token with a digit and a letter), parentheses
    holding a number, and counts above one (as `N`): `RF-3 (quote q-9) released 2 times` is `released N times`."""
    text = foreign_text.line(example, 1000)
    text = _WRAPPED_ID.sub(" ", text)
    text = " ".join(token for token in text.split(" ") if not _ID.fullmatch(token.strip(",:;()")))
    text = _NUMBER.sub(lambda number: number[0] if float(number[0]) < 2 else "N", text)
    text = _DANGLING.sub(lambda match: match[1] or "", _SPACES.sub(" ", text))
    return text.strip()[:SHAPE_LIMIT]


def expectation_failure(key: str, condition: str, metric: str,
                        by_reason: Mapping[str, Mapping[str, int]]) -> Failure:
    """An `[expect]` key failed; when it counts rejections, with the logged reasons it counted and their replicas."""
    if metric != "rejections":
        return Failure("expectation", key)
    try:
        selector = dict(parse_threshold(key, condition).selector)
    except ThresholdError:
        selector = {}
    named = selector.get("reason")
    counted = {reason: replicas for reason, replicas in by_reason.items()
               if (named is None or reason == named) and any(count > 0 for count in replicas.values())}
    replicas = _sorted(replica for by_replica in counted.values() for replica, count in by_replica.items()
                       if count > 0 and selector.get("replica") in (None, replica))
    return Failure("expectation", key, replicas=replicas,
                   reasons=() if named is not None else _sorted(foreign_text.line(reason, 200) for reason in counted))


def _sorted(items: Iterable[str | None]) -> tuple[str, ...]:
    return tuple(sorted({item for item in items if item}))[:_MOST]

