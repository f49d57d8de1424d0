"""How long each matcher that reads outside text takes on a 1 MiB hostile line, beside the pattern it replaced.

A replica's log line and a server's error text are written by the target; the patterns of
512d30e took time quadratic in their length (0.7 to 2.4 s at 8 KB). For each matcher this
script builds the line that was worst for the old pattern (and, where it differs, the one
worst for the new matcher), then times:

- the new matcher on 1 MiB of it (best of `--repeat`),
- a baseline measured in the same run on the same line: one pass of the regex engine over
  it (`re.sub(r"\\s+", " ", line)`), so a slow moment of a shared machine shows in both,
- the old pattern on 4, 8 and 16 KiB of the same line (once each: it is quadratic, so
  1 MiB would take hours), and the ratio of its 16 KiB time to its 8 KiB time (about 4
  for quadratic, about 2 for linear).

Raw figures go to `results/benchmarks/linear_matching-<utc>.json`. Run from the repository root:

    python benchmarks/linear_matching.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # `python benchmarks/linear_matching.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(REPO_ROOT))

from harness import secrets
from harness.logs import parse
from harness.mrtr import error_text, reasons

MIB = 1 << 20
_NAMES = r"(?:api[_\-]?key|key|token|secret|password|passwd|credentials?)"
_VALUE = r"(?!<)[^\s,;\"'&]+"
OLD = {
    "reasons": re.compile(r"requestState rejected on (?P<method>[\w/]+): (?P<reason>.+?)\s*$"),
    "rich_path": re.compile(r"\s+[\w.\-]+\.py:\S*\s*$"),
    "trace_fields": re.compile(r"(?i)[\s,;]*\"?[\w.]*(?:trace[_.]?id|span[_.]?id|traceparent)\"?\s*[=:]\s*\"?"
                               r"[0-9a-f][0-9a-f-]{15,54}\"?"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*"),
    "secret_assignment": re.compile(rf"(?i)(?<![A-Za-z0-9])((?:[A-Za-z0-9]+[_\-.])*{_NAMES}[\"']?\s*=\s*[\"']?)"
                                    rf"{_VALUE}"),
    "url_userinfo": re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/@:]*):[^\s/@]+@"),
    "error_id": re.compile(r"\b(?=[\w\-]*\d)(?=[\w\-]*[A-Za-z])[A-Za-z0-9][\w\-]*"),
}
"""The patterns of 512d30e, as the reference."""

Matcher = Callable[[str], object]
CASES: list[tuple[str, str, Matcher, Callable[[str], object], Callable[[int], str]]] = [
    ("mrtr/reasons.py", "reasons", reasons.rejection_parts, OLD["reasons"].search,
     lambda n: "requestState rejected on tools/call: x" + " " * n + "y"),
    ("mrtr/reasons.py", "reasons (many heads)", reasons.rejection_parts, OLD["reasons"].search,
     lambda n: "requestState rejected on x" * (n // 26)),
    ("logs/parse.py _RICH_PATH", "rich_path", parse._without_rich_path, lambda s: OLD["rich_path"].sub("", s),
     lambda n: " " * n + "x"),
    ("logs/parse.py _TRACE_FIELDS", "trace_fields", parse._without_trace_fields,
     lambda s: OLD["trace_fields"].sub("", s), lambda n: "a" * n + "trace"),
    ("logs/parse.py _TRACE_FIELDS", "trace_fields (many names)", parse._without_trace_fields,
     lambda s: OLD["trace_fields"].sub("", s), lambda n: "trace_id " * (n // 9)),
    ("secrets.py JWT", "jwt", secrets._JWT.apply, lambda s: OLD["jwt"].sub("<token>", s), lambda n: "eyJ-" * (n // 4)),
    ("secrets.py JWT", "jwt (many heads)", secrets._JWT.apply, lambda s: OLD["jwt"].sub("<token>", s),
     lambda n: "eyJ." * (n // 4)),
    ("secrets.py *_SECRET=", "secret_assignment", secrets._ASSIGNMENT.apply,
     lambda s: OLD["secret_assignment"].sub(r"\1<redacted>", s), lambda n: "a_" * (n // 2)),
    ("secrets.py *_SECRET=", "secret_assignment (many names)", secrets._ASSIGNMENT.apply,
     lambda s: OLD["secret_assignment"].sub(r"\1<redacted>", s), lambda n: "xkey=" * (n // 5)),
    ("secrets.py user:pass@", "url_userinfo", secrets._USERINFO.apply,
     lambda s: OLD["url_userinfo"].sub(r"\1\2:<redacted>@", s), lambda n: "a." * (n // 2)),
    ("secrets.py user:pass@", "url_userinfo (many schemes)", secrets._USERINFO.apply,
     lambda s: OLD["url_userinfo"].sub(r"\1\2:<redacted>@", s), lambda n: "a://" * (n // 4)),
    ("mrtr/error_text.py <id>", "error_id", lambda s: error_text._ID.sub(error_text._id_or_kept, s),
     lambda s: OLD["error_id"].sub("<id>", s), lambda n: "a-" * (n // 2)),
    ("mrtr/error_text.py <id>", "error_id (dashes)", lambda s: error_text._ID.sub(error_text._id_or_kept, s),
     lambda s: OLD["error_id"].sub("<id>", s), lambda n: "-" * n),
]
SPACES = re.compile(r"\s+")


def best(function: Matcher, text: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function(text)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for where, name, new, old, hostile in CASES:
        line = hostile(MIB)
        baseline = best(lambda text: SPACES.sub(" ", text), line, args.repeat)
        seconds = best(new, line, args.repeat)
        old_times = {size: best(old, hostile(size * 1024), 1) for size in (4, 8, 16)}
        rows.append({"where": where, "case": name, "chars": len(line), "new_ms": round(seconds * 1e3, 1),
                     "baseline_ms": round(baseline * 1e3, 1), "new_over_baseline": round(seconds / baseline, 2),
                     "old_ms": {f"{size}KiB": round(value * 1e3, 1) for size, value in old_times.items()},
                     "old_growth_8_to_16": round(old_times[16] / max(old_times[8], 1e-9), 1)})
        row = rows[-1]
        print(f"{where:32} {name:32} new {row['new_ms']:7.1f} ms (baseline {row['baseline_ms']:6.1f} ms, "
              f"x{row['new_over_baseline']:5.2f})  old 4/8/16 KiB {old_times[4] * 1e3:7.1f} / "
              f"{old_times[8] * 1e3:7.1f} / {old_times[16] * 1e3:7.1f} ms (x{row['old_growth_8_to_16']})",
              flush=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = REPO_ROOT / "results" / "benchmarks" / f"linear_matching-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": stamp, "python": platform.python_version(), "machine": platform.machine(),
                               "rows": rows}, indent=2) + "\n")
    print(f"raw figures: {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
