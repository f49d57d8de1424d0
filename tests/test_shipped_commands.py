"""The commands the harness ships (scenarios/, deploy/, the docs' examples) keep every value one word.

The harness fills a placeholder with its value as it is (`harness.targets.commands.fill`): in an
argv list that is one argument, but inside an `sh -c` script's text the shell reads it again, so a
temporary folder with a space in its path breaks `cat {key_file}`, and a value holding `;` or
`$(...)` runs. Every shipped `sh -c` command therefore gives its values as arguments after the
script ("$1", "$2"); `rename`'s new name is one word of letters, digits, _, . and -.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.config.chaos import CommandAction
from harness.config.commands import placeholders_in
from harness.config.scenario import load_scenario, parse_scenario
from harness.config.strict import ScenarioError
from harness.targets.commands import fill, run_command
from tests.harness_run import ROOT, SCENARIOS

SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash"}


def _scenario_commands(text: str, source: str) -> Iterator[tuple[str, list[str]]]:
    scenario = parse_scenario(text, source)
    for name, argv in scenario.target.commands.items():
        yield f"{source}: {name}", argv
    for number, step in enumerate(scenario.chaos, 1):
        if isinstance(step, CommandAction):
            yield f"{source}: [[chaos]] {number}", step.command
            if step.rollback is not None:
                yield f"{source}: [[chaos]] {number} rollback", step.rollback
    if scenario.target.auth is not None and scenario.target.auth.command:
        yield f"{source}: [target.auth] command", scenario.target.auth.command


def shipped_commands() -> Iterator[tuple[str, list[str]]]:
    """Every command argv the repository ships, named by where it is."""
    for path in sorted(SCENARIOS.rglob("*.toml")):
        yield from _scenario_commands(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for key, text in ((document or {}).get("data") or {}).items():
                if key.endswith(".toml"):
                    yield from _scenario_commands(text, f"{path.relative_to(ROOT)} {key}")
    for path in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        for block in re.findall(r"```toml\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            table_start = re.search(r"^\[target\.commands\]$", block, re.M)
            if table_start is not None:
                table = tomllib.loads(block[table_start.start():])
                for name, argv in table["target"]["commands"].items():
                    yield f"{path.relative_to(ROOT)}: {name}", argv


def test_no_shipped_shell_script_has_a_placeholder_in_its_text() -> None:
    scripts = [(where, argv) for where, argv in shipped_commands() if argv[0] in SHELLS and argv[1:2] == ["-c"]]
    assert len(scripts) >= 25, scripts  # kubernetes.toml, deploy/, external/, your-deployment.md
    inside = [(where, sorted(placeholders_in([argv[2]]))) for where, argv in scripts if placeholders_in([argv[2]])]
    assert inside == []


def test_the_shipped_key_commands_keep_a_hostile_key_file_path_one_word(tmp_path: Path) -> None:
    """scenarios/external/on-call-rotation.toml's key commands, pointed at a folder here instead of /etc/mcp and
    filled as a rotation fills them, with a key file whose path has a space and a `$(...)`: each runs as written,
    and nothing in the path runs."""
    commands = load_scenario(SCENARIOS / "external" / "on-call-rotation.toml").target.commands
    folder = tmp_path / "etc-mcp"
    folder.mkdir()
    (folder / "r1.ring").write_text("old\n")
    odd = tmp_path / "tmp dir $(touch pwned)"
    odd.mkdir()
    key_file = odd / "key"
    key_file.write_text("new\n")
    values = {"key_file": str(key_file), "key_id": "k1", "replica": "r1", "index": "0", "url": "http://127.0.0.1:9"}
    rings = []
    for name in ("add-key", "promote-key", "retire-key"):
        argv = [arg.replace("/etc/mcp", str(folder)) for arg in commands[name]]
        done = run_command(fill(argv, values), timeout=10, env={}, pass_env=())
        assert done.ok, (name, done.output, done.error)
        rings.append((folder / "r1.ring").read_text())
    assert rings == ["old\nnew\n", "new\nold\n", "new\n"]
    assert not list(Path().glob("pwned")) and not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("name", ["shop; rm -rf ~", "$(id)", "eu shop", "-shop", "shop\n"])
def test_a_rename_to_more_than_one_word_is_refused_naming_the_line(name: str) -> None:
    text = ('name = "r"\nduration = "5s"\n[load]\narrival_rate = 1\n[[flows]]\nkind = "refund"\n'
            f'[[chaos]]\nat = 1\naction = "rename"\nname = {tomllib_string(name)}\n')
    with pytest.raises(ScenarioError) as error:
        parse_scenario(text, "s.toml")
    assert str(error.value).startswith("s.toml:10: chaos[1].name: must be letters, digits, _, . and -, starting "
                                       "with a letter or digit"), str(error.value)
    assert parse_scenario(text.replace(tomllib_string(name), '"shop-eu.2"')).chaos[0].name == "shop-eu.2"


def tomllib_string(value: str) -> str:
    """A TOML basic string holding `value`."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
