"""A load process imports Locust first (gevent patched) without Locust's web UI, which it gets back on demand.

Each check runs in a fresh interpreter: what a process has imported cannot be undone.
"""

from __future__ import annotations

import subprocess
import sys

from tests.harness_run import ROOT


def run_python(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_gevent_is_patched_and_the_web_ui_is_not_imported():
    assert run_python(
        "import sys, socket, threading\n"
        "from harness.runtime.locust_first import import_locust\n"
        "import_locust()\n"
        "import gevent.socket, gevent.monkey\n"
        "print(socket.socket is gevent.socket.socket, gevent.monkey.is_module_patched('threading'))\n"
        "print('flask' in sys.modules, 'locust.env' in sys.modules)\n"
    ) == ["True", "True", "False", "True"]


def test_whatever_uses_the_web_ui_gets_the_real_one():
    """A web UI made through Locust's environment is Locust's own; so is any other name of `locust.web`."""
    assert run_python(
        "import sys\n"
        "from harness.runtime.locust_first import import_locust\n"
        "import_locust()\n"
        "from locust.env import Environment\n"
        "ui = Environment().create_web_ui(host='127.0.0.1', port=0)\n"
        "print(type(ui).__module__, type(ui).__name__, 'flask' in sys.modules)\n"
        "ui.greenlet.kill()\n"
        "import locust.web\n"
        "print(locust.web.InputField.__module__, sys.modules['locust.web'].__file__.endswith('web.py'))\n"
    ) == ["locust.web", "WebUI", "True", "locust.web", "True"]
