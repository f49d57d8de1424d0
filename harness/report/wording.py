"""How a verdict's numbers and details read: as a person would write them, in every output.

A ratio to three places (0.973, not 0.972972972972973), a duration with its unit (183ms,
2.5s), a count with thousands separators, a rate per second; a chaos action's detail as
a sentence (`serving again after 161ms; add-key on r1,r2, then promote-key on r1,r2`)
rather than the dict the journal keeps for scripts. summary.json keeps the raw numbers
beside these texts; only what people read is worded here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.config.metric_table import METRICS
from harness.config.thresholds import DISTRIBUTIONS, RATIOS, SLOPES

SECONDS_METRICS = frozenset(name for name, metric in METRICS.items() if metric.seconds)
"""Distributions measured in seconds: shown as 250ms / 1.5s rather than 0.25 / 1.5."""

_METRIC = re.compile(r"\s*([a-z_]+)")


def format_seconds(seconds: float) -> str:
    """Seconds as a person reads them: 0.5ms, 183ms, 2.5s, 95s."""
    if seconds < 1:
        return f"{seconds * 1000:.3g}ms"
    return f"{seconds:.3g}s" if seconds < 100 else f"{seconds:.0f}s"


def format_ratio(value: float) -> str:
    return f"{value:.3f}"


def format_slope(per_minute: float) -> str:
    """Memory growth in MB a minute, to the hundredth (10 KB a minute): a leak gate's scale, and no digits beyond
    what the fit can tell."""
    return f"{per_minute:.2f}"


def format_number(metric: str, aggregate: str, value: float) -> str:
    """A threshold's value or observation in its metric's unit: a ratio, seconds, a rate or a count."""
    if metric in RATIOS:
        return format_ratio(value)
    if metric in SLOPES:
        return f"{format_slope(value)} MB/min"
    if metric in SECONDS_METRICS and aggregate != "count":
        return format_seconds(value)
    if aggregate == "rate":
        return f"{value:.3g}/s"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}"


def probe_item(item: Mapping[str, Any]) -> str:
    """One threshold of a hypothesis probe's detail: `completed_ratio >= 0.600 (observed 0.973)`, or
    `completed_ratio >= 0.600 not judged (no samples)`."""
    key = str(item.get("threshold"))
    condition = str(item.get("condition"))
    match = _METRIC.match(key)
    metric = match.group(1) if match else key
    words = condition.split()
    aggregate = words[0] if words and words[0][0].isalpha() else ""
    if metric in RATIOS and aggregate == "count":  # journals written before ratios said so
        aggregate = "ratio"
    observed = item.get("observed")
    seen = "no samples" if not isinstance(observed, int | float) else format_number(metric, aggregate, observed)
    written = _condition(metric, aggregate, words[1:] if aggregate else words, condition)
    if item.get("judged") is False:
        return f"{key} {written} not judged ({item.get('why') or seen})"
    return f"{key} {written} (observed {seen})"


def _condition(metric: str, aggregate: str, rest: list[str], written: str) -> str:
    """A journaled condition (`count == 0`, `p(95) < 0.25`) as a person writes it: `== 0`, `p(95) < 250ms`."""
    if len(rest) != 2:
        return written
    op, value = rest
    try:
        number = float(value)
    except ValueError:
        return written
    shown = "" if aggregate in ("", "count", "ratio", "slope") and metric not in DISTRIBUTIONS else f"{aggregate} "
    return f"{shown}{op} {format_number(metric, aggregate, number)}"


def window_text(window: Mapping[str, Any] | None, t: float | None) -> str:
    """The window a hypothesis probe judged: the flows that ended between two moments of the run."""
    if window and isinstance(window.get("from"), int | float) and isinstance(window.get("to"), int | float):
        return f"flows that ended {window['from']:.1f}s–{window['to']:.1f}s"
    return "" if t is None else f"probed at {t:.1f}s"


def describe_chaos(detail: Any) -> str:
    """A chaos action's detail as sentences: what it did and how long the target took to serve again."""
    if not isinstance(detail, Mapping):
        return "" if detail is None else str(detail)
    parts = [_chaos_part(str(key), value) for key, value in detail.items()]
    return "; ".join(part for part in parts if part)


def describe_fault_rounds(rounds: Mapping[str, Mapping[str, int]] | None) -> str:
    """A network fault's rounds by replica and outcome: `rounds sent into it: r2 answer_lost 5, complete 3`."""
    if rounds is None:
        return ""
    if not rounds:
        return "no round sent into it"
    return "rounds sent into it: " + "; ".join(
        f"{replica} " + ", ".join(f"{outcome} {n}" for outcome, n in sorted(outcomes.items(), key=lambda i: -i[1]))
        for replica, outcomes in rounds.items())


def _chaos_part(key: str, value: Any) -> str:
    if key == "ready_after":
        return "serving again after " + _seconds_list(value)
    if key == "paused_for":
        return f"paused for {_seconds_list(value)}"
    if key == "ttl_real":
        return f"TTL set to {_seconds_list(value)} (real)"
    if key == "offset":
        return f"clock off by {value:+g}s" if isinstance(value, int | float) else f"clock off by {value}"
    if key == "name":
        return f"renamed to {value}"
    if key == "new":
        return f"new key {value}"
    if key == "old":
        return f"old key {value}"
    if key == "phases" and isinstance(value, list):
        return ", then ".join(str(phase) for phase in value)
    if key == "commands" and isinstance(value, list):
        return "; ".join(_command(command) for command in value)
    if key == "undone" and isinstance(value, list):
        return "undid " + "; ".join(str(item) for item in value) if value else "nothing to undo"
    if key == "replica":
        return f"replica {value}"
    return f"{key.replace('_', ' ')} {_plain(value)}"


def _command(command: Any) -> str:
    if not isinstance(command, Mapping):
        return str(command)
    took = command.get("seconds")
    took_text = f", {format_seconds(took)}" if isinstance(took, int | float) else ""
    return f"ran {command.get('name', 'a command')} on {command.get('target', 'all')} " \
           f"(exit {command.get('exit_code')}{took_text})"


def _seconds_list(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format_seconds(value)
    if isinstance(value, list):
        return ", ".join(_seconds_list(item) for item in value) or "-"
    return "not measured" if value is None else str(value)


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list):
        return ", ".join(_plain(item) for item in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{key} {_plain(item)}" for key, item in value.items())
    return str(value)
