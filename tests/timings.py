"""Timings a slow test shows in its output even when it passes (and output is captured).

The image and compose tests cost minutes on a fresh machine and seconds with a warm cache:
what each step took is printed with the test's result, and kept in the JUnit report
(`user_properties`), so a slow CI run can be read without re-running it. Never asserted on.
"""

from __future__ import annotations

import pytest


def report(request: pytest.FixtureRequest, title: str, lines: list[str]) -> None:
    """Write `lines` under `[title]` to the terminal, and keep them as the test's "timing" properties."""
    for line in lines:
        request.node.user_properties.append(("timing", line))
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in lines:
            reporter.write_line(f"[{title}] {line}")


def seconds(value: float | None, what: str) -> str:
    """`what: 12.3 s`, or `what: cached` when the step was skipped (None)."""
    return f"{what}: cached" if value is None else f"{what}: {value:.1f} s"
