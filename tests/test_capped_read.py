"""Reading a file someone else wrote: never more than the cap, never through a link, never blocked on a pipe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.capped_read import NotPlain, TooLarge, read_capped


def test_a_file_at_the_cap_is_read_whole_and_one_byte_over_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 64)
    assert read_capped(path, 64) == b"x" * 64
    with pytest.raises(TooLarge):
        read_capped(path, 63)


def test_an_endless_file_costs_one_read_of_the_cap() -> None:
    with pytest.raises(TooLarge):
        read_capped(Path("/dev/zero"), 1 << 20)


def test_plain_only_refuses_a_link_and_a_pipe_and_reads_no_further(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_text("not yours")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(NotPlain, match="symbolic link"):
        read_capped(tmp_path / "link", 100, plain_only=True)
    assert read_capped(tmp_path / "link", 100) == b"not yours", "without plain_only a link is a file like any other"
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(NotPlain, match="not a plain file"):
        read_capped(tmp_path / "pipe", 100, plain_only=True)  # no writer: it would block if it were opened to read
    with pytest.raises(FileNotFoundError):
        read_capped(tmp_path / "missing", 100, plain_only=True)
