"""A journal part on disk as segments: closed ones compressed in the background, the open one plain.

A part (`journal.jsonl`, a worker's `journal-w<N>.jsonl`) is one stream of JSON lines,
and every reader sees it so: sizes and offsets (the live fold's, the snapshot's) are of
that stream, whatever is compressed. On disk the stream is cut into segments. The open
segment keeps the part's own name and is always plain text, so a SIGKILL loses nothing
already written. Once it holds `segment_bytes()` or more (checked after each batch, so a
segment always ends on a whole line), it is renamed `journal.<END>.jsonl`, where END is
the part's offset its text ends at (12 digits: the segments sort by name in stream order,
and each one's start is the END of the one before, 0 for the first), a new open segment
is started under the part's name, and a thread compresses the closed one to
`journal.<END>.jsonl.zst` (zstd, written under a temporary name, then renamed; the plain
one is removed after). A closed segment may be found plain (not compressed yet) or
compressed; readers take the plain one when both are there.

Everything read is untrusted: a compressed segment is decompressed as a stream, in
bounded chunks, with a bounded window, and never past the length its name and the name
before it give; one that ends early, runs long or does not decompress is the journal's
damage (one unreadable line), and the next segment is read from its own start.
"""

from __future__ import annotations

import bisect
import os
import re
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import zstandard

from harness._compat.threads import native_threads
from harness.atomic_files import open_append
from harness.vocabulary import SEGMENT_BYTES

SEGMENT_ENV = "MRTR_JOURNAL_SEGMENT_BYTES"
"""An environment variable that sets `SEGMENT_BYTES` for a run (tests use a few kilobytes to roll often)."""
LEVEL = 1
"""zstd's compression level: on a run's journal, level 1 compresses as well as level 3 and faster."""
MAX_WINDOW = 1 << 23
"""The largest zstd window a reader accepts (level 1 writes 512 KiB windows): a hostile frame cannot ask for more
memory than this."""
CHUNK = 1 << 20
MAX_LINE = 16 << 20
"""A longer line in a compressed segment is damage (a real record is a few kilobytes): it is never held whole."""
_DIGITS = 12


class Damage(Protocol):
    """Where a reader counts what it could not read (`harness.journal.writer.JournalDamage`)."""

    unreadable: int


class Readable(Protocol):
    """A segment opened for reading: a plain file, or a compressed one's text (`_Decompressed`)."""

    def read(self, limit: int, /) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Closed:
    """A closed segment: the part's bytes from `start` to `end`, in `path` (plain, or zstd when `compressed`)."""

    path: Path
    start: int
    end: int
    compressed: bool


def segment_bytes() -> int:
    """The size at which a run's journal segments roll: `SEGMENT_ENV` when set to a positive integer, else
    `SEGMENT_BYTES`."""
    value = os.environ.get(SEGMENT_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else SEGMENT_BYTES


def closed_path(part: Path, end: int) -> Path:
    """The plain name of `part`'s segment that ends at offset `end`."""
    return part.with_name(f"{_stem(part)}.{end:0{_DIGITS}d}.jsonl")


def _stem(part: Path) -> str:
    return part.name.removesuffix(".jsonl")


def closed_segments(part: Path) -> list[Closed]:
    """`part`'s closed segments in stream order (a plain one when it is also found compressed)."""
    pattern = re.compile(re.escape(_stem(part)) + rf"\.(\d{{{_DIGITS}}})\.jsonl(\.zst)?")
    found: dict[int, Path] = {}
    try:
        names = os.listdir(part.parent)
    except OSError:
        return []
    for name in names:
        match = pattern.fullmatch(name)
        if match is not None and (match[2] is None or int(match[1]) not in found):
            found[int(match[1])] = part.with_name(name)
    segments, start = [], 0
    for end in sorted(found):
        segments.append(Closed(found[end], start, end, found[end].suffix == ".zst"))
        start = end
    return segments


def part_exists(part: Path) -> bool:
    """Whether any of `part` is on disk: its open segment or a closed one."""
    return part.is_file() or bool(closed_segments(part))


def part_size(part: Path) -> int:
    """Bytes in the part's stream: up to its last closed segment's end, then its open segment."""
    closed = closed_segments(part)
    base = closed[-1].end if closed else 0
    try:
        return base + part.stat().st_size
    except FileNotFoundError:
        return base


def part_names(folder: Path, stem: str) -> list[str]:
    """The parts in `folder` whose stem matches regular expression `stem`, by any of their segments' names."""
    pattern = re.compile(rf"({stem})(?:\.\d{{{_DIGITS}}})?\.jsonl(?:\.zst)?")
    names = set()
    for path in folder.iterdir() if folder.is_dir() else ():
        match = pattern.fullmatch(path.name)
        if match is not None:
            names.add(f"{match[1]}.jsonl")
    return sorted(names)


class PartReader:
    """The bytes of a part's stream from an offset on, segment after segment; each `read` stays within one segment.

    It can be read again after it found no more (the run's live fold reads up to where the writer has flushed,
    then later on): the open segment is followed by its file, also after it was renamed closed, and the next
    segment is found by its start. What cannot be read is counted in `damage`.
    """

    def __init__(self, part: Path, offset: int = 0, damage: Damage | None = None, stop: int | None = None) -> None:
        self.part = part
        self.offset = offset
        self.stop = stop
        """Where to stop: a closed segment's end (`harness.folding.parallel` reads a stretch of segments); None: on."""
        self._damage = damage
        self._file: Readable | None = None
        self._end: int | None = None
        """Where the segment read now ends, when it is closed (else it is the open one)."""
        self._closed: list[Closed] = []
        self._ends: list[int] = []
        self.broken = False
        """The last segment left ended short of its end (damage): its last line is cut."""

    def read(self, limit: int = CHUNK) -> bytes:
        """Up to `limit` bytes from `offset` on, all of one segment; b"" when the part holds no more now."""
        for _ in range(3):
            if self._file is None and ((self.stop is not None and self.offset >= self.stop) or not self._open()):
                return b""
            assert self._file is not None
            want = limit if self._end is None else min(limit, self._end - self.offset)
            chunk = self._file.read(want) if want > 0 else b""
            if chunk:
                self.offset += len(chunk)
                return chunk
            if self._end is not None and (self.offset < self._end or self._file.read(1) or _failed(self._file)):
                self._count_damage()  # ended early (truncated), runs on or fails its checksum: not what its name says
                self.broken = True
                self.offset = self._end
            was_open = self._end is None
            self._close_segment()
            if was_open and not self._rolled_at_offset():
                return b""
        return b""

    def _rolled_at_offset(self) -> bool:
        """After the open segment gave nothing: whether it was rolled since (the next segment may hold more)."""
        closed = self._list()
        return bool(closed) and closed[-1].end >= self.offset

    def _list(self) -> list[Closed]:
        """The part's closed segments, listed again (a roll may have added one)."""
        self._closed = closed_segments(self.part)
        self._ends = [segment.end for segment in self._closed]
        return self._closed

    def _open(self) -> bool:
        """Open the segment holding `offset`; False when the stream holds nothing there yet."""
        while True:
            if not self._ends or self.offset >= self._ends[-1]:
                self._list()  # past the segments known: there may be more
            index = bisect.bisect_right(self._ends, self.offset)
            if index < len(self._closed):
                segment = self._closed[index]
                self._file, self._end = self._open_closed(segment), segment.end
                if self._file is not None:
                    return True
                continue  # not readable (counted): on to the next one
            base = self._ends[-1] if self._ends else 0
            if self.offset < base:
                return False
            try:
                file = open(self.part, "rb")  # noqa: SIM115 - closed in _close_segment
            except FileNotFoundError:
                return False  # between a roll's rename and the new open segment
            if self._list()[-1:] and self._ends[-1] != base:
                file.close()  # rolled while it was opened: look again
                continue
            file.seek(self.offset - base)
            self._file, self._end = file, None
            return True

    def _open_closed(self, segment: Closed) -> Readable | None:
        """A file-like of `segment` from `offset`; None (damage counted, offset moved past it) when it is not
        readable."""
        try:
            if not segment.compressed:
                try:
                    file = open(segment.path, "rb")  # noqa: SIM115 - closed in _close_segment
                    file.seek(self.offset - segment.start)
                    return file
                except FileNotFoundError:
                    segment = Closed(segment.path.with_name(segment.path.name + ".zst"), segment.start, segment.end,
                                     True)  # compressed meanwhile
            return _Decompressed(segment.path, self.offset - segment.start)
        except (OSError, zstandard.ZstdError):
            self._count_damage()
            self.broken = True
            self.offset = segment.end
            return None

    def _count_damage(self) -> None:
        if self._damage is not None:
            self._damage.unreadable += 1

    def _close_segment(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file, self._end = None, None

    def close(self) -> None:
        self._close_segment()


class _Decompressed:
    """A compressed segment's text as a file to read from, from offset `skip` of it, in bounded chunks; reading
    what does not decompress gives b"" (the reader counts the segment short)."""

    def __init__(self, path: Path, skip: int) -> None:
        self._raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        self.failed = False
        """It did not decompress (a damaged block, a checksum that does not match, a window too large)."""
        self._reader = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW).stream_reader(
            self._raw, read_size=CHUNK, read_across_frames=False)
        while skip > 0:
            data = self.read(min(skip, CHUNK))
            if not data:
                break
            skip -= len(data)

    def read(self, limit: int) -> bytes:
        try:
            return self._reader.read(limit)
        except zstandard.ZstdError:
            self.failed = True
            return b""

    def close(self) -> None:
        self._reader.close()
        self._raw.close()


def _failed(file: Readable) -> bool:
    return isinstance(file, _Decompressed) and file.failed


def part_lines(part: Path, offset: int = 0, damage: Damage | None = None) -> Iterator[bytes]:
    """The lines of a part's stream from `offset` (a line's start), each with its newline but a torn last one's.

    A line that runs longer than `MAX_LINE` is damage, skipped to its end; the cut last line of a segment that
    ended short is damage too (counted with the segment)."""
    for lines, whole in part_batches(part, offset, damage):
        if whole:
            for line in lines:
                yield line + b"\n"
        else:
            yield from lines


class UnalignedStop(Exception):
    """A stretch read up to `stop` did not end on a line's end: a line runs on into the next segment (a damaged or
    foreign journal; a run's writer ends each segment on a whole line). Read the part as one instead."""


def part_batches(part: Path, offset: int = 0, damage: Damage | None = None,
                 stop: int | None = None) -> Iterator[tuple[list[bytes], bool]]:
    """`part_lines`' lines in batches, each line without its newline, with whether they are whole: the last batch
    is a torn last line alone (no newline after it), `whole` False. A reader that folds every line takes a batch
    at a time: a line at a time would cost a generator's step per record. With `stop` (a closed segment's end),
    the lines up to there, and `UnalignedStop` when a line runs on past it."""
    reader = PartReader(part, offset, damage, stop)
    rest = b""
    skipping = False
    try:
        while chunk := reader.read():
            if reader.broken:  # the segment before ended short: its cut line was counted with it
                reader.broken, rest, skipping = False, b"", False
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            if skipping and lines:
                del lines[0]  # the end of a line longer than MAX_LINE
                skipping = False
            if lines:
                yield lines, True
            if len(rest) > MAX_LINE:
                rest, skipping = b"", True
                if damage is not None:
                    damage.unreadable += 1
    finally:
        reader.close()
    if stop is not None and (rest or skipping) and not reader.broken:
        raise UnalignedStop(f"{part}: a line runs on past offset {stop}")
    if rest and not skipping and not reader.broken:
        yield [rest], False


class Compressor:
    """Compresses closed segments one after another on a thread of its own (a native thread under gevent: the
    compression never runs in the hub, and zstd lets go of the interpreter's lock while it works)."""

    def __init__(self) -> None:
        self._queue: deque[Path] = deque()
        self._start_thread, allocate_lock = native_threads()
        self._wake = allocate_lock()
        self._wake.acquire()
        self._done = allocate_lock()
        self._done.acquire()
        self._started = False
        self._stopping = False

    def submit(self, path: Path) -> None:
        """Compress closed segment `path` soon; it stays readable, plain or compressed, all along."""
        self._queue.append(path)
        if not self._started:
            self._started = True
            self._start_thread(self._loop, ())
        self._wake_up()

    def close(self, timeout: float = 60.0) -> None:
        """Finish what was submitted (at most `timeout` seconds), then stop."""
        if not self._started or self._stopping:
            return
        self._stopping = True
        self._wake_up()
        self._done.acquire(timeout=timeout)

    def _wake_up(self) -> None:
        try:
            self._wake.release()
        except RuntimeError:
            pass  # already awake

    def _loop(self) -> None:
        while True:
            self._wake.acquire()
            while self._queue:
                compress_segment(self._queue[0])
                self._queue.popleft()
            if self._stopping:
                self._done.release()
                return


def _no_follow(path: str, flags: int) -> int:
    """`open`'s opener that never writes through a symbolic link planted at the name (ELOOP instead)."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def compress_segment(path: Path) -> Path | None:
    """`path` compressed beside it as `<name>.zst` (whole, or not at all), then removed; None (one line on standard
    error, the plain segment kept) when it cannot be."""
    target = path.with_name(path.name + ".zst")
    temporary = path.with_name(path.name + ".zst.tmp")
    try:
        with open(path, "rb") as source, open(temporary, "wb", opener=_no_follow) as out:
            zstandard.ZstdCompressor(level=LEVEL, write_checksum=True).copy_stream(
                source, out, size=os.fstat(source.fileno()).st_size, read_size=CHUNK, write_size=CHUNK)
        os.replace(temporary, target)
        os.unlink(path)
    except OSError as exc:
        print(f"mrtr-harness: journal segment {path} kept plain: {exc}", file=sys.stderr)
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return None
    return target


class SegmentedFile:
    """A part's open segment, appended to in whole-line batches; rolled and handed to `compressor` once it holds
    `limit` bytes (None: never rolled). With `compress=False`, closed segments stay plain (a worker's spool, whose
    closed segments are removed once shipped: `harness.load.distributed.JournalShipper`)."""

    def __init__(self, part: Path, limit: int | None, compressor: Compressor | None = None, *,
                 compress: bool = True) -> None:
        self.part = part
        self.limit = limit
        self._owns_compressor = compress and compressor is None
        self._compressor = compressor if compressor is not None or not compress else Compressor()
        self._file: IO[bytes] = open_append(part, binary=True)
        self.size = part_size(part)
        """Bytes in the part's stream, every written batch included."""

    def write(self, batch: bytes) -> None:
        self._file.write(batch)
        self._file.flush()
        self.size += len(batch)
        if self.limit is not None and self._file.tell() >= self.limit:
            self._roll()

    def _roll(self) -> None:
        self._file.close()
        closed = closed_path(self.part, self.size)
        os.rename(self.part, closed)
        self._file = open_append(self.part, binary=True)
        if self._compressor is not None:
            self._compressor.submit(closed)

    def close(self) -> None:
        """Close the open segment (it stays plain) and, with a compressor of its own, finish compressing."""
        self._file.close()
        if self._owns_compressor and self._compressor is not None:
            self._compressor.close()
