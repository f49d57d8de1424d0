"""The exit codes a CI engineer branches on: one table, the same in docs/exit-codes.md and in every `--help`."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.cli.reference import EXIT_CODES_BEGIN, EXIT_CODES_END
from harness.exit_codes import MAIN, TABLE, markdown_table

ROOT = Path(__file__).resolve().parent.parent


def help_text(*argv: str) -> str:
    """What `mrtr-harness ARGV --help` prints, from the real parser."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return out.getvalue()


def squeezed(text: str) -> str:
    """Text without whitespace: argparse rewraps an epilog (and may break at a hyphen)."""
    return "".join(text.split())


@pytest.mark.parametrize("command", list(TABLE))
def test_every_help_lists_its_command_s_rows_of_the_table(command: str) -> None:
    shown = squeezed(help_text() if command == MAIN else help_text(command))
    for code, meaning in TABLE[command]:
        assert squeezed(f"{int(code)} {meaning}") in shown, (command, int(code))
    assert "docs/exit-codes.md" in shown


def test_every_command_has_rows_in_the_table() -> None:
    """A new subcommand without its exit codes fails here: the main --help lists every subcommand."""
    listed = set(re.findall(r"^    ([a-z][\w-]*)\s{2,}", help_text(), re.MULTILINE))
    assert listed and listed == set(TABLE) - {MAIN}


def test_docs_hold_the_table_every_help_is_written_from() -> None:
    text = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    section = text.partition(EXIT_CODES_BEGIN + "\n")[2].partition(EXIT_CODES_END)[0]
    assert section == markdown_table()
    assert "| `run` | 130 | interrupted: Ctrl-C or SIGTERM" in section
