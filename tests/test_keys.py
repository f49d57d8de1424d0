"""Key material: ring files readable by their owner only from the moment they exist, and none left behind.

The modes are checked at every moment the harness touches a ring file (an audit hook
sees each open, chmod, rename and removal, and reads the file's mode right then), under
a umask of 0 so that anything not created 0600 would show as world-readable.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config.scenario import parse_scenario
from harness.mrtr.keys import fingerprint, new_key, read_ring, write_ring
from harness.targets.embedded import EmbeddedTarget
from tests.harness_run import key_files
from tests.services import REQUIRE_SERVICES_ENV, fail_or_skip

_WATCHED: list[Path] = []
_MODES: dict[str, set[int]] = {}
_EVENTS = {"open", "os.chmod", "os.rename", "os.remove", "os.truncate"}


def _audit(event: str, args: tuple) -> None:
    if not _WATCHED or event not in _EVENTS or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path = os.fsdecode(args[0])
    if any(path.startswith(str(folder)) for folder in _WATCHED):
        with contextlib.suppress(OSError):  # not created yet, or gone
            _MODES.setdefault(path, set()).add(stat.S_IMODE(os.stat(path).st_mode))


sys.addaudithook(_audit)


@pytest.fixture
def watched(tmp_path) -> Iterator[dict[str, set[int]]]:
    """Every mode seen of every file under tmp_path/rings* while the test runs, with the umask at 0."""
    _MODES.clear()
    _WATCHED.append(tmp_path)
    umask = os.umask(0)
    try:
        yield _MODES
    finally:
        os.umask(umask)
        _WATCHED.clear()


def ring_modes(modes: dict[str, set[int]]) -> dict[str, set[int]]:
    return {path: seen for path, seen in modes.items() if "/rings/" in path or path.endswith("keyring")}


def test_a_ring_file_is_never_readable_by_others_even_while_written(watched, tmp_path):
    ring = tmp_path / "rings" / "r1"
    write_ring(ring, [new_key()])
    write_ring(ring, [new_key(), *read_ring(ring)])  # a rotation replaces it
    assert ring_modes(watched), "the audit hook saw no ring file"
    assert all(seen == {0o600} for seen in ring_modes(watched).values()), watched
    assert stat.S_IMODE(ring.stat().st_mode) == 0o600


@pytest.mark.services
def test_a_rotation_by_root_leaves_the_ring_to_its_owner(tmp_path):
    """The compose stack's harness (root) rotates the ring its replicas (nobody) read: they must still read it.
    Only root can give a file to another user: skipped for anyone else, a failure with MRTR_REQUIRE_SERVICES=1
    (CI runs as root)."""
    import pwd

    if os.geteuid() != 0:
        fail_or_skip("only root can give a file to another user",
                     failure=f"{REQUIRE_SERVICES_ENV}=1 and not root: only root can give a file to another user; "
                             f"run the suite as root (as .ci/run does) or unset {REQUIRE_SERVICES_ENV}")
    nobody = pwd.getpwnam("nobody")
    ring = tmp_path / "ring"
    write_ring(ring, [new_key()])
    os.chown(ring, nobody.pw_uid, nobody.pw_gid)  # as compose's key-ring service, running as nobody, leaves it
    write_ring(ring, [new_key(), *read_ring(ring)])
    assert (ring.stat().st_uid, ring.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert stat.S_IMODE(ring.stat().st_mode) == 0o600
    assert len(read_ring(ring)) == 2


SCENARIO = """
name = "rings"
duration = "5s"

[target]
kind = "embedded"
replicas = 2
keyring = "file"

[load]
arrival_rate = 1

[[flows]]
kind = "refund"
"""


def test_the_embedded_target_writes_its_rings_0600_and_deletes_them_when_it_stops(watched, tmp_path):
    target = EmbeddedTarget(parse_scenario(SCENARIO), tmp_path / "target")
    try:
        target.start()
        rings = [target.deployment.ring_file(index) for index in range(2)]
        assert all(stat.S_IMODE(ring.stat().st_mode) == 0o600 for ring in rings)
        old = target.ring(0)
        target.set_ring(0, [new_key(), *old])  # chaos rotates a replica's ring
        assert fingerprint(target.ring(0)[1]) == fingerprint(old[0])
    finally:
        target.stop()
    assert ring_modes(watched) and all(seen == {0o600} for seen in ring_modes(watched).values()), watched
    assert not key_files(tmp_path), key_files(tmp_path)
