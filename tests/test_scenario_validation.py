"""`mrtr-harness validate` as a user runs it: endless or zero-length settings refused, every error at its line.

A scenario with `duration = "inf"` or `arrival_rate = inf` would start a run that never
ends (or floods the target); a zero TTL or timeout one that fails for no reason the
target caused. They are refused before anything starts, with exit code 2, and every
error names the line to fix, including those only a whole table can detect (an
external target without urls, a chaos step after the end of the run).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness_run import ROOT

BASE = """\
name = "validation"
duration = "30s"
grace = "5s"

[target]
kind = "embedded"
replicas = 2
ttl = "10m"

[load]
model = "open"
arrival_rate = 2
ramp = "5s"
timeout = "30s"

[[flows]]
kind = "refund"

[[chaos]]
at = "5s"
action = "restart"

[[chaos]]
at = "10s"
action = "kill"
replica = 2
"""

# (edit of BASE, the line the error must name, text the error must hold)
BROKEN = {
    "endless-duration": (('duration = "30s"', 'duration = "inf"'), 2, "duration: a duration must be finite"),
    "endless-rate": (("arrival_rate = 2", "arrival_rate = inf"), 12, "load.arrival_rate: Input should be a finite"),
    "nan-rate": (("arrival_rate = 2", "arrival_rate = nan"), 12, "load.arrival_rate"),
    "zero-duration": (('duration = "30s"', 'duration = "0s"'), 2, "duration: Input should be greater than 0"),
    "zero-ttl": (('ttl = "10m"', "ttl = 0"), 8, "target.ttl: Input should be greater than 0"),
    "zero-timeout": (('timeout = "30s"', 'timeout = "0s"'), 14, "load.timeout: Input should be greater than 0"),
    "endless-grace": (('grace = "5s"', 'grace = "inf"'), 3, "grace: a duration must be finite"),
    "chaos-after-the-end": (('at = "10s"', 'at = "40s"'), 24, "chaos[2].at: a kill at 40s falls after the end"),
    "chaos-on-a-missing-replica": (("replica = 2", "replica = 3"), 26, "chaos[2].replica: kill names replica 3"),
    "external-without-urls": (('kind = "embedded"', 'kind = "external"'), 6, "target.kind: an external target needs"),
    "open-without-a-rate": (("arrival_rate = 2\n", ""), 11, "load.model: an open model needs arrival_rate"),
    "override-of-a-missing-replica": (("replicas = 2\n", "replicas = 2\noverrides = [{ replica = 5 }]\n"), 8,
                                      "target.overrides: overrides names replica 5"),
    "ratio-that-can-never-pass": (("replica = 2\n", 'replica = 2\n\n[expect]\ncompleted_ratio = ">= 5"\n'), 28,
                                  "completed_ratio is a ratio from 0 to 1, so '>= 5' could never pass"),
    "ratio-with-a-count": (("replica = 2\n", 'replica = 2\n\n[expect]\ncompleted_ratio = "count >= 0.9"\n'), 28,
                           "completed_ratio is a ratio (0 to 1) and takes no count"),
    "percentile-above-100": (("replica = 2\n", 'replica = 2\n\n[expect]\nround_duration = "p(195) < 1s"\n'), 28,
                             "p(195) is not a percentile: write p(N) with N above 0 and at most 100"),
}


def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "validate", *map(str, paths)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60, check=False)


def test_the_base_scenario_is_valid(tmp_path):
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    result = validate(path)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Every broken file validated in one command: each one's exit status is the command's, its message on stderr."""
    folder = tmp_path_factory.mktemp("broken")
    paths = {}
    for name, ((old, new), _, _) in BROKEN.items():
        assert old in BASE, name
        paths[name] = folder / f"{name}.toml"
        paths[name].write_text(BASE.replace(old, new, 1))
    result = validate(*paths.values())
    assert "Traceback" not in result.stderr
    messages = {name: next((line for line in result.stderr.splitlines() if f"{path}:" in line), "")
                for name, path in paths.items()}
    return {name: (result.returncode, message) for name, message in messages.items()}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_bad_setting_is_refused_with_exit_2_naming_its_line(refused, name, tmp_path):
    _, line, text = BROKEN[name]
    code, message = refused[name]
    assert code == 2
    assert f"{name}.toml:{line}: " in message, message
    assert text in message, message
    # alone, the same file fails the command by itself
    path = tmp_path / f"{name}.toml"
    (old, new), _, _ = BROKEN[name]
    path.write_text(BASE.replace(old, new, 1))
    assert validate(path).returncode == 2


def test_zero_is_accepted_where_it_means_something(tmp_path):
    """A chaos step at the very start, no grace, no ramp, back-to-back restarts and instant leads are all valid."""
    path = tmp_path / "zeros.toml"
    path.write_text(BASE.replace('at = "5s"', 'at = "0s"').replace('grace = "5s"', "grace = 0")
                    .replace('ramp = "5s"', 'ramp = "0s"')
                    + '\n[[chaos]]\nat = "1s"\naction = "rolling-restart"\ninterval = 0\n'
                    + '\n[leads]\nthink = { dist = "constant", value = "0s" }\n')
    result = validate(path)
    assert result.returncode == 0, result.stderr
