"""Every `mrtr-harness` command in README.md and the guides in docs/ parses, and the scenario files it names are valid.

A user copies these lines: an option renamed in the code, or a scenario file that moved,
must fail here rather than in their terminal. Each line is parsed by the command line's own
parser (nothing runs), and each scenario file it names goes through `validate`. The lines
that can run here run in tests/test_guides_run.py.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from harness.cli.main import build_parser
from harness.config.scenario import load_scenario
from tests.guides import DOCUMENTS, commands
from tests.harness_run import ROOT

COMMANDS = commands()


def test_the_docs_show_commands_at_all():
    assert len(COMMANDS) >= 15, [where for where, _ in COMMANDS]


def test_the_capacity_guides_commands_are_among_those_parsed():
    """docs/capacity-planning.md's sweeps, its sample's command included, go through the parser below."""
    capacity = [line for where, line in COMMANDS if where.startswith("docs/capacity-planning.md: ")]
    assert len(capacity) >= 3 and all(line.startswith("mrtr-harness capacity ") for line in capacity), capacity
    assert any("--step 10s" in line for line in capacity), capacity


@pytest.mark.parametrize("line", [line for _, line in COMMANDS], ids=[where for where, _ in COMMANDS])
def test_every_command_in_the_docs_parses_and_its_scenarios_are_valid(line: str) -> None:
    argv = shlex.split(line)[1:]
    parser = build_parser()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            args = parser.parse_args(argv)
        except SystemExit as end:
            assert end.code == 0, f"{line}: {stderr.getvalue()}"  # --help exits 0
            return
    for word in argv:
        path = ROOT / word
        if word.endswith(".toml") and "*" not in word and path.parent.name in ("scenarios", "on-call", "external"):
            assert path.is_file(), f"{line}: {word} does not exist"
            load_scenario(path)
    assert args.handler is not None


def _compose_services() -> set[str]:
    import yaml

    return set(yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"])


TRIAGE = [line for _, line in COMMANDS if line.startswith("mrtr-harness triage ")]


def test_the_docs_show_the_docker_triage_of_the_shipped_stack():
    assert any("--docker-service" in line and "--docker-project mrtr" in line for line in TRIAGE), TRIAGE


@pytest.mark.parametrize("line", TRIAGE)
def test_every_triage_line_passes_triages_own_checks_and_names_the_shipped_stacks_services(line: str) -> None:
    """Beyond argparse: triage's checks at its edge, and a `--docker-project mrtr` line names services that
    docker-compose.yml runs (a name it does not have finds no container: exit 3)."""
    from harness.triage.cli import parse_options

    options = parse_options(build_parser().parse_args(shlex.split(line)[1:]))
    if options.docker_project == "mrtr":
        assert set(options.docker_services) <= _compose_services(), line


def test_the_docs_docker_log_sources_name_the_shipped_stacks_services():
    """A `docker:` log source for compose project mrtr names a service of docker-compose.yml."""
    from harness.config.logs import COMPOSE_PROJECT, COMPOSE_SERVICE, docker_labels

    found = [(path.name, entry) for path in DOCUMENTS
             for entry in re.findall(r'"(docker:[^"]+)"', path.read_text(encoding="utf-8"))]
    assert found
    for where, entry in found:
        labels = docker_labels(entry)
        assert labels.get(COMPOSE_PROJECT) == "mrtr" and labels.get(COMPOSE_SERVICE) in _compose_services(), \
            (where, entry)


def test_every_error_code_the_harness_names_is_defined_where_on_call_reads_them():
    """docs/on-call.md's table of codes has a row for each code the harness classifies or pre-sets per host."""
    from harness.metrics.registry import HOST_CODES
    from harness.mrtr import outcome

    codes = {*HOST_CODES, *(str(code) for code in (outcome.INVALID_PARAMS, outcome.MISSING_REQUIRED_CLIENT_CAPABILITY,
                                                   outcome.HEADER_MISMATCH))}
    text = (ROOT / "docs" / "on-call.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `(-\d+)` \|", text, re.MULTILINE))
    assert codes <= rows, sorted(codes - rows)
