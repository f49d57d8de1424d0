"""How much a run's journal shrinks when its closed segments are compressed, and what each codec costs.

Runs `mrtr-harness run` (the path users run) on the smoke scenario at a higher arrival rate with a small
segment size, so the run itself rolls and compresses its journal, then reads every segment back and
compares: the bytes on disk against the plain stream, and zstd (levels 1, 3, 6) against gzip (1, 6)
on the whole plain stream (best of five, one core). The run's own exit code is printed, not
judged: the smoke thresholds are not set for this rate. The figures go to benchmarks/README.md.

    python benchmarks/journal_compression.py [--rate 150] [--duration 25s]
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import zstandard

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.journal.segments import SEGMENT_ENV, part_lines


def _scenario(folder: Path, rate: float) -> Path:
    text = (ROOT / "scenarios" / "smoke.toml").read_text(encoding="utf-8")
    path = folder / "smoke-fast.toml"
    path.write_text(re.sub(r"(?m)^arrival_rate = \S+", f"arrival_rate = {rate:g}", text, count=1), encoding="utf-8")
    return path


def _best(action: Callable[[], bytes], times: int = 5) -> tuple[bytes, float]:
    best, out = float("inf"), b""
    for _ in range(times):
        started = time.perf_counter()
        out = action()
        best = min(best, time.perf_counter() - started)
    return out, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=150.0)
    parser.add_argument("--duration", default="25s")
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = {**os.environ, SEGMENT_ENV: str(args.segment_bytes)}
        done = subprocess.run([sys.executable, "-m", "harness", "run", str(_scenario(folder, args.rate)),
                               "--duration", args.duration, "--results", str(folder / "results"), "--quiet"],
                              cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        (results,) = [path for path in (folder / "results").iterdir() if path.is_dir()]
        part = results / "journal.jsonl"
        plain = b"".join(part_lines(part))
        on_disk = sum(path.stat().st_size for path in results.glob("journal*.jsonl*"))
        flows = plain.count(b'"type":"flow"')
        print(f"run exit {done.returncode}; {flows:,} flows; plain stream {len(plain):,} bytes "
              f"({len(plain) / max(flows, 1):,.0f} a flow); on disk {on_disk:,} bytes "
              f"({on_disk / max(flows, 1):,.0f} a flow, {len(plain) / on_disk:.1f}x)")
        closed = sorted(results.glob("journal.*.jsonl.zst"))
        closed_plain = len(plain) - part.stat().st_size
        closed_bytes = sum(path.stat().st_size for path in closed)
        print(f"{len(closed)} closed segments: {closed_plain:,} plain bytes in {closed_bytes:,} "
              f"({closed_plain / max(closed_bytes, 1):.1f}x); the open segment {part.stat().st_size:,} bytes plain")
        for level in (1, 3, 6):
            out, spent = _best(lambda level=level: zstandard.ZstdCompressor(level=level).compress(plain))
            print(f"zstd -{level}: {len(out):,} bytes ({len(plain) / len(out):.1f}x), {spent * 1000:.0f} ms "
                  f"({len(plain) / spent / 1e6:.0f} MB/s)")
        for level in (1, 6):
            out, spent = _best(lambda level=level: gzip.compress(plain, compresslevel=level, mtime=0))
            print(f"gzip -{level}: {len(out):,} bytes ({len(plain) / len(out):.1f}x), {spent * 1000:.0f} ms "
                  f"({len(plain) / spent / 1e6:.0f} MB/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
