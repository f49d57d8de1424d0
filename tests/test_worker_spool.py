"""A worker's journal spool over a long run: every line shipped once and in order across segment rolls, and the
spool's segments removed once the master acknowledged them, so a worker's disk stays bounded; one that cannot ship,
or whose master never acknowledges, keeps everything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.journal.segments import SEGMENT_ENV, closed_segments
from harness.journal.writer import Journal, read_journal
from harness.load.distributed import JournalShipper, journal_part, open_spool

RECORDS = 1500
SHIP_AFTER = (1, 2, 3, 40, 1, 7, 90, 5, 1, 130, 11, 2, 60)
"""Writes between two batches, in turn: one roll between two batches, none, or several (a segment holds about 20
records)."""


@pytest.fixture
def spool(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(SEGMENT_ENV, "2000")
    return journal_part(tmp_path, 0)


def _record(n: int) -> dict[str, object]:
    return {"type": "start", "flow_id": f"w0-{n}", "note": "réponse ✓", "pad": "x" * 40}


def _write(journal: Journal, n: int) -> None:
    journal.write(_record(n))
    journal.flush()  # one batch per record: a segment rolls right after the record that fills it


def _flow_ids(lines: list[str]) -> list[str]:
    return [json.loads(line)["flow_id"] for line in lines]


def _on_disk(spool: Path) -> list[str]:
    return sorted(path.name for path in spool.parent.iterdir())


def test_every_line_of_the_spool_is_shipped_once_in_order_across_rolls(spool):
    """Rolls come between batches one, none or several at a time (the open segment renamed under the shipper, a
    new one started): the master gets every record once, in order, byte for byte."""
    journal = open_spool(spool)
    sent: list[list[str]] = []
    shipper = JournalShipper(spool, lambda lines, end: sent.append(lines))
    waits = iter(SHIP_AFTER * 100)
    due = next(waits)
    for n in range(RECORDS):
        _write(journal, n)
        due -= 1
        if not due:
            shipper.ship()
            due = next(waits)
    journal.close()
    shipper.close()
    lines = [line for batch in sent for line in batch]
    assert _flow_ids(lines) == [f"w0-{n}" for n in range(RECORDS)]
    assert [json.loads(line) for line in lines] == [_record(n) for n in range(RECORDS)]
    assert shipper.shipped == RECORDS
    assert len(sent) < RECORDS / 10  # shipped in batches, not a message a line


def _acknowledging(sent: list[str], shipper: list[JournalShipper]):
    """A master that writes each batch and acknowledges it at once."""
    def send(lines: list[str], end: int) -> None:
        sent.extend(lines)
        shipper[0].acknowledge(end)
    return send


def test_acknowledged_spool_segments_are_removed_so_the_spool_stays_bounded(spool):
    """After each acknowledged batch the spool holds its open segment and the newest closed one, whatever the run's
    length; closed segments stay plain (never compressed on the worker)."""
    journal = open_spool(spool)
    sent: list[str] = []
    holder: list[JournalShipper] = []
    shipper = JournalShipper(spool, _acknowledging(sent, holder))
    holder.append(shipper)
    for n in range(RECORDS):
        _write(journal, n)
        if n % 30 == 29:  # a little more than one roll between batches
            shipper.ship()
            closed = closed_segments(spool)
            assert _on_disk(spool) == [closed[-1].path.name, spool.name]
            assert not closed[-1].compressed
    journal.close()
    shipper.close()
    assert closed[-1].end > 30 * 2000  # many rolls went by
    assert _flow_ids(sent) == [f"w0-{n}" for n in range(RECORDS)]
    assert len(_on_disk(spool)) <= 3
    assert shipper.all_acknowledged


def test_a_segment_shipped_but_not_acknowledged_stays_until_the_master_has_it(spool):
    """Sent is not enough: a master that dies before it writes a batch would lose it. The spool keeps every segment
    until an acknowledgement covers it, then removes those (but for the newest closed one), and no more."""
    journal = open_spool(spool)
    sent: list[tuple[list[str], int]] = []
    shipper = JournalShipper(spool, lambda lines, end: sent.append((lines, end)))
    for n in range(RECORDS // 3):
        _write(journal, n)
        if n % 25 == 24:
            shipper.ship()
    kept = closed_segments(spool)
    assert len(kept) > 10 and shipper.shipped > 0 and not shipper.all_acknowledged  # shipped, none acknowledged
    assert [record["flow_id"] for record in read_journal(spool)] == [f"w0-{n}" for n in range(RECORDS // 3)]
    halfway = sent[len(sent) // 2][1]
    shipper.acknowledge(halfway)
    left = closed_segments(spool)
    assert [segment.end for segment in left if segment.end <= halfway] == [max(s.end for s in kept if s.end <= halfway)]
    assert [segment.path for segment in left if segment.end > halfway] == [s.path for s in kept if s.end > halfway]
    shipper.acknowledge(10**12)  # never beyond what was sent
    assert shipper.acknowledged == shipper.offset
    journal.close()
    shipper.close()


class _Unreachable(ConnectionError):
    pass


def test_a_worker_that_cannot_ship_keeps_its_whole_spool_and_ships_it_once_when_it_can(spool):
    """A send that fails removes nothing: the spool reads back whole. Once sends go through, the batch that failed
    goes first, nothing is shipped twice, and the shipped segments go."""
    journal = open_spool(spool)
    sent: list[str] = []
    reachable = False

    def send(lines: list[str], end: int) -> None:
        if not reachable:
            raise _Unreachable("the master went away")
        sent.extend(lines)
        shipper.acknowledge(end)

    shipper = JournalShipper(spool, send)
    for n in range(RECORDS // 2):
        _write(journal, n)
        if n % 25 == 24:
            with pytest.raises(_Unreachable):
                shipper.ship()
    assert sent == [] and shipper.shipped == 0
    assert len(closed_segments(spool)) > 10  # every closed segment kept, plain
    assert [record["flow_id"] for record in read_journal(spool)] == [f"w0-{n}" for n in range(RECORDS // 2)]
    reachable = True
    for n in range(RECORDS // 2, RECORDS):
        _write(journal, n)
        if n % 25 == 24:
            shipper.ship()
    journal.close()
    shipper.close()
    assert _flow_ids(sent) == [f"w0-{n}" for n in range(RECORDS)]
    assert len(closed_segments(spool)) == 1
