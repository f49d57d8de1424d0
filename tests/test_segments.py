"""The journal in segments: closed ones compressed as the run goes, the open one plain, every reader reading both."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard

from harness.journal.segments import SEGMENT_ENV, closed_segments, compress_segment, part_lines
from harness.journal.writer import Journal, JournalDamage, read_journal
from harness.load.distributed import JournalParts
from harness.processes.children import alive
from harness.report import journal_parts
from harness.run.live_fold.worker import LiveFold
from tests.harness_run import ROOT, SCENARIOS, run_harness, valid_summary
from tests.services import sigint_default

SMOKE = SCENARIOS / "smoke.toml"
TINY = {SEGMENT_ENV: "2048"}
"""Segments of 2 KiB: a few seconds of the smoke run roll several."""
COUNTS = ("status", "exit_code", "flows", "rejections", "invariants", "reconciliation")


@pytest.fixture(scope="module")
def segmented(tmp_path_factory):
    return run_harness(SMOKE, tmp_path_factory.mktemp("segmented"), "--duration", "3s", env=TINY)


def _report(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "report", str(folder)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def _copy(folder: Path, tmp_path: Path, *, figures: bool) -> Path:
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    if not figures:
        (copy / "figures.json").unlink()  # `report` folds the journal itself
    return copy


def test_a_run_rolls_its_journal_into_compressed_segments_and_one_plain_open_one(segmented):
    assert segmented.code == 0, segmented.output
    folder = segmented.folder
    compressed = sorted(folder.glob("journal.*.jsonl.zst"))
    assert len(compressed) >= 3
    assert [path.name for path in folder.glob("journal*.jsonl")] == ["journal.jsonl"]  # nothing closed left plain
    start = 0
    for path in compressed:  # each is a whole number of lines, exactly the part's bytes its name says
        end = int(re.fullmatch(r"journal\.(\d+)\.jsonl\.zst", path.name)[1])
        text = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
        assert len(text) == end - start and text.endswith(b"\n"), path.name
        start = end
    summary = segmented.summary
    assert summary["journal"]["parts"] == [str(folder / "journal.jsonl")]
    assert summary["journal"]["records"] == len(segmented.journal()) and summary["journal"]["unreadable"] == 0


@pytest.mark.parametrize("figures", [False, True], ids=["journal-alone", "saved-figures"])
def test_report_of_a_segmented_folder_gives_the_run_s_own_counts(segmented, tmp_path, figures):
    copy = _copy(segmented.folder, tmp_path, figures=figures)
    rebuilt = _report(copy)
    assert rebuilt.returncode == 0, rebuilt.stderr
    before, after = segmented.summary, valid_summary(copy / "summary.json")
    for key in COUNTS:
        assert after[key] == before[key], key
    assert after["journal"]["records"] == before["journal"]["records"]


def test_a_truncated_compressed_segment_is_a_damaged_journal_in_one_line(segmented, tmp_path):
    copy = _copy(segmented.folder, tmp_path, figures=False)
    last = sorted(copy.glob("journal.*.jsonl.zst"))[-1]
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    rebuilt = _report(copy)
    assert rebuilt.returncode == 4, rebuilt.stderr
    damaged = [line for line in rebuilt.stderr.splitlines() if "damaged" in line]
    assert damaged == ["mrtr-harness report: the journal is damaged: 1 journal line could not be read, so the "
                       "verdict above is not trusted (exit 4; --lenient exits as it says)"]
    assert valid_summary(copy / "summary.json")["journal"]["unreadable"] == 1


def test_a_run_killed_with_sigkill_keeps_every_record_it_wrote(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(SMOKE), "--results", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                               env={**os.environ, **TINY}, preexec_fn=sigint_default)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not process.stdout.readline().startswith("target up"):
        pass
    (folder,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    journal = folder / "journal.jsonl"
    while time.monotonic() < deadline and not (len(list(folder.glob("journal.*.jsonl.zst"))) >= 2
                                               and journal.stat().st_size > 0):
        time.sleep(0.2)
    try:
        written = list(read_journal(journal))  # every record on disk now, compressed or not
        process.kill()
        process.wait(10)
        kept = list(read_journal(journal))
        assert len(written) > 10 and kept[: len(written)] == written
        whole = journal.read_bytes().split(b"\n")[:-1]  # the open segment's whole lines (it may have just rolled)
        assert not whole or json.loads(whole[-1]) == kept[-1]  # the last record is in the plain open segment
        rebuilt = _report(folder)
        assert rebuilt.returncode == 130, rebuilt.stdout + rebuilt.stderr  # cut off: interrupted
        summary = valid_summary(folder / "summary.json")
        assert summary["journal"]["records"] == len(kept) and summary["journal"]["unreadable"] == 0
    finally:
        process.kill()
        for log in (folder / "target" / "logs").glob("*.log"):
            for pid in re.findall(r"Started server process \[(\d+)\]", log.read_text()):
                if alive(int(pid)):
                    os.kill(int(pid), signal.SIGKILL)


def test_the_workers_parts_roll_and_read_back_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv(SEGMENT_ENV, "2000")
    grown: list[tuple[str, int]] = []
    parts = JournalParts(tmp_path, lambda name, size: grown.append((name, size)))
    for index in (0, 1):
        parts.open(index)
    for n in range(300):
        parts.append(n % 2, [json.dumps({"type": "start", "flow_id": f"w{n % 2}-{n}", "pad": "x" * 40})])
    parts.close()
    assert journal_parts(tmp_path) == [tmp_path / "journal.jsonl", tmp_path / "journal-w0.jsonl",
                                       tmp_path / "journal-w1.jsonl"]
    for index in (0, 1):
        part = tmp_path / f"journal-w{index}.jsonl"
        assert len(closed_segments(part)) >= 3 and all(segment.compressed for segment in closed_segments(part))
        flows = [record["flow_id"] for record in read_journal(part)]
        assert flows == [f"w{index}-{n}" for n in range(index, 300, 2)]
        assert grown[-1 - (1 - index)] == (part.name, sum(len(line) for line in part_lines(part)))


def test_a_compressed_segment_longer_than_its_name_says_is_read_no_further(tmp_path):
    """A hostile folder: a small file that decompresses to far more than the segment's name allows."""
    part = tmp_path / "journal.jsonl"
    bomb = tmp_path / "journal.000000000020.jsonl"
    bomb.write_bytes(b'{"type":"run"}\n' + b"x" * (8 << 20))
    compress_segment(bomb)
    part.write_bytes(b'{"type":"flow"}\n')
    damage = JournalDamage()
    assert list(read_journal(part, damage=damage)) == [{"type": "run"}, {"type": "flow"}]  # its 20 bytes, then on
    assert damage.unreadable == 1  # the segment runs on past its end (its cut line goes with it)


def test_the_live_fold_follows_the_journal_across_rolls_and_into_compressed_segments(tmp_path):
    """The fold reads as the run writes (its open segment renamed under it), then falls behind until every segment it
    has not read is compressed: it folds every record once, in order."""
    journal = Journal(tmp_path / "journal.jsonl", segment_bytes=1500)
    fold = LiveFold(tmp_path)
    for n in range(400):
        journal.write({"type": "start", "t": 1.0, "flow_id": f"f{n}", "flow": "refund"})
        if n % 7 == 0:
            journal.flush()
            if n < 200:  # the first half folded as it is written; the rest only after the close
                fold.read_part("journal.jsonl", journal.size)
    journal.close()
    assert len(closed_segments(tmp_path / "journal.jsonl")) > 10
    assert [path.name for path in tmp_path.glob("journal*.jsonl")] == ["journal.jsonl"]  # all closed compressed
    fold.read_part("journal.jsonl", journal.size)
    fold.close()
    assert (fold.read.records, fold.read.unreadable, fold.read.torn) == (400, 0, 0)
    assert fold.folded == {"journal.jsonl": journal.size}


def test_a_compressed_segment_asking_for_a_huge_window_is_damage_not_memory(tmp_path):
    """A hostile frame that wants a 1 GiB window to decompress: refused as damage, the rest of the part read."""
    text = b'{"type":"run"}\n' * 100
    stream = zstandard.ZstdCompressor(compression_params=zstandard.ZstdCompressionParameters(window_log=30)
                                      ).compressobj()  # streamed: the frame keeps the 1 GiB window it declares
    frame = stream.compress(text) + stream.flush()
    assert zstandard.get_frame_parameters(frame).window_size == 1 << 30
    (tmp_path / f"journal.{len(text):012d}.jsonl.zst").write_bytes(frame)
    (tmp_path / "journal.jsonl").write_bytes(b'{"type":"flow"}\n')
    damage = JournalDamage()
    assert list(read_journal(tmp_path / "journal.jsonl", damage=damage)) == [{"type": "flow"}]
    assert damage.unreadable == 1


def test_a_compressed_segment_whose_checksum_fails_is_damage(tmp_path):
    """Its text the right length, a byte of it changed on disk: zstd's checksum says so, and so does the reader."""
    text = b"".join(b'{"type":"start","flow_id":"f%d"}\n' % n for n in range(50))
    frame = bytearray(zstandard.ZstdCompressor(level=1, write_checksum=True).compress(text))
    frame[-1] ^= 0xFF  # the checksum's last byte
    (tmp_path / f"journal.{len(text):012d}.jsonl.zst").write_bytes(bytes(frame))
    (tmp_path / "journal.jsonl").write_bytes(b'{"type":"flow"}\n')
    damage = JournalDamage()
    assert list(read_journal(tmp_path / "journal.jsonl", damage=damage)) == [{"type": "flow"}]  # none of it taken
    assert damage.unreadable == 1
