"""Log lines are outside text: none of them, however odd, blinds the collector or triage, and each is counted.

A line with an impossible stamp (a `+24:00` zone, a naive year-1 time), JSON nested past the
recursion limit or anything else the parser cannot read is skipped and counted per source; a
line longer than 64 KiB is read cut and counted; the lines after it are read as usual.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli.main import main
from harness.config.logs import LogSource
from harness.logs.collector import Collector, RejectionEvent
from harness.logs.parse import LINE_CAP, LineParser, Rejection
from harness.logs.stamps import line_time, record_time
from harness.triage.cli import Options, read_once
from tests.test_logs import append, shop_line, wait_for

REJECTION = "WARNING replica=r1 mcp.server.request_state: requestState rejected on tools/call: {reason}\n"

HOSTILE = [
    "2026-11-30T05:12:58.000+24:00 " + REJECTION.format(reason="seal"),
    "0001-01-01 00:00:00 " + REJECTION.format(reason="seal"),
    json.dumps({"message": "requestState rejected on tools/call: seal", "time": "0001-01-01T00:00:00"}) + "\n",
    json.dumps({"message": "requestState rejected on tools/call: seal", "ts": 10 ** 400}) + "\n",
    '{"a":' * 5000 + '"requestState"' + "}" * 5000 + "\n",
]
"""Lines that raised outside the reader's guard at 512d30e, each a rejection or one a parser looks into."""


def triage_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["triage", "--once", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_triage_counts_every_rejection_around_a_line_stamped_plus_24_hours_and_exits_as_the_verdict_says(
        tmp_path, capsys):
    log = tmp_path / "r.log"
    log.write_text("2026-11-30T05:12:57.934Z " + REJECTION.format(reason="seal")
                   + "2026-11-30T05:12:58.000+24:00 " + REJECTION.format(reason="seal")
                   + "2026-11-30T05:12:59.934Z " + REJECTION.format(reason="unknown key").replace("r1", "r2"))
    code, counted = triage_json(capsys, "--file", str(log))
    assert counted["by_reason"]["seal"] == 2 and counted["by_reason"]["unknown key"] == 1
    assert counted["rejections"] == 3
    assert code == 1 == counted["exit_code"]  # seal means tampering: the verdict fails


def test_triage_skips_and_counts_the_lines_it_cannot_read_and_the_lines_it_cuts_per_source(tmp_path, capsys):
    log = tmp_path / "r.log"
    log.write_text("".join(HOSTILE) + "x" * (LINE_CAP * 3) + REJECTION.format(reason="seal")
                   + "2026-11-30T05:12:59Z " + REJECTION.format(reason="expired"))
    code, counted = triage_json(capsys, "--file", str(log))
    assert counted["by_reason"]["expired"] == 1, counted  # read on after every hostile line
    assert counted["bad_lines"] >= 1 and counted["cut_lines"] == 1
    (source,) = counted["sources"].values()
    assert source == {"lines": len(HOSTILE) + 2, "bad": counted["bad_lines"], "cut": 1}


def test_a_followed_file_is_read_on_after_lines_the_parser_cannot_read(tmp_path):
    log = tmp_path / "app.log"
    log.touch()
    events: list[RejectionEvent] = []
    lock = threading.Lock()

    def on_rejection(event: RejectionEvent) -> None:
        with lock:
            events.append(event)

    collector = Collector(on_rejection, since=time.time())
    collector.follow(LogSource("file", str(log), "app"))
    try:
        append(log, *HOSTILE, "y" * (LINE_CAP + 10) + "\n", shop_line(time.time(), "expired"))
        wait_for(lambda: any(event.reason == "expired" for event in events), "the line after the hostile ones")
    finally:
        collector.stop(settle=0.1)
    (read,) = collector.sources()
    assert read.bad >= 1 and read.cut == 1 and read.unobserved_from is None
    assert collector.lost == []


# --- properties --------------------------------------------------------------------------------

_SHAPES = st.sampled_from([
    "{stamp} WARNING replica={text} mcp.server.request_state: requestState rejected on {text}: {text}",
    '{{"time": "{stamp}", "message": "requestState rejected on tools/call: {text}", "pod": "{text}"}}',
    "[{stamp}] WARNING  requestState rejected on {text}   request_state.py:{text}",
    "{text}",
])
_STAMPS = st.one_of(
    st.builds(lambda y, mo, d, h, mi, s, z: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{z}",
              st.integers(0, 9999), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
              st.integers(0, 99), st.sampled_from(["", "Z", "+24:00", "-99:99", "+00:00", "+2359"])),
    st.builds(lambda m, d, y: f"{m:02d}/{d:02d}/{y:02d} 99:99:99", st.integers(0, 99), st.integers(0, 99),
              st.integers(0, 99)),
    st.text(max_size=40),
)


@st.composite
def _lines(draw: st.DrawFn) -> str:
    text = draw(st.text(max_size=60))
    line = draw(_SHAPES).format(stamp=draw(_STAMPS), text=text)
    depth = draw(st.integers(0, 3000))
    if draw(st.booleans()):
        line = '{"message": ' * depth + json.dumps(line) + "}" * depth
    return line


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_lines(), max_size=8), st.floats(allow_nan=True, allow_infinity=True) | st.none())
def test_the_parser_takes_any_line_stamp_and_nesting_without_an_exception(lines, wall):
    found: list[Rejection] = []
    parser = LineParser(found.append, wall=(lambda: wall) if wall is not None else None)
    for line in lines:
        parser.feed(line)
        parser.feed(line, "r1", wall)
    parser.flush()
    assert parser.bad <= 2 * len(lines)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), st.floats() | st.none(),
       st.dictionaries(st.sampled_from(["time", "ts", "timestamp", "@timestamp"]),
                       st.integers() | st.floats() | st.text(max_size=40) | st.booleans() | st.none()))
def test_a_stamp_is_a_time_or_none_never_an_exception(text, near, record):
    assert line_time(text, near) is None or isinstance(line_time(text, near), float)
    assert record_time(record, near) is None or isinstance(record_time(record, near), float)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_lines(), min_size=1, max_size=6))
def test_triage_reads_any_log_to_its_end_and_counts_what_it_could_not_read(tmp_path: Path, lines):
    log = tmp_path / "any.log"
    one_line = str.maketrans({"\n": " ", "\r": " ", "\0": " "})  # NUL: a binary file, which triage refuses by name
    log.write_text("\n".join(line.translate(one_line) for line in lines) + "\n", encoding="utf-8",
                   errors="surrogatepass")
    read = read_once(Options(files=[(None, log)]))
    assert read.snapshot is not None and read.code in (0, 1), read.said
    (source,) = read.snapshot.sources.values()
    assert source["lines"] == len(lines)
