"""The assistant's children end: every command has a limit, and one stopped at it says so and is reaped.

A folder handed to `report` or `compare` may be huge or hostile; a tool call must not wait on it forever.
"""

from __future__ import annotations

import sys

import anyio

from harness.assistant.children import COMMAND_SECONDS, run_child

# The child restores SIGINT's default itself (CI may start jobs with it ignored) and then hangs on its input's pipe.
HANGS = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                               "print('started', flush=True); time.sleep(3600)"]


def test_every_command_has_a_limit_by_default():
    assert run_child.__kwdefaults__ is not None and run_child.__kwdefaults__["deadline"] == COMMAND_SECONDS


def test_a_child_past_its_limit_is_stopped_reaped_and_says_so():
    finished = anyio.run(lambda: run_child(HANGS, deadline=0.5))
    assert finished.stopped
    assert finished.code != 0
    assert finished.stdout == "started\n"
    assert finished.stderr.strip().splitlines()[-1] == "stopped by the server after 0.5s (its limit for this command)"


def test_a_child_that_ends_in_time_is_not_stopped():
    finished = anyio.run(lambda: run_child([sys.executable, "-c", "import sys; sys.exit(3)"]))
    assert (finished.code, finished.stopped, finished.stderr) == (3, False, "")
