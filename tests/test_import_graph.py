"""The layout holds: no import cycle anywhere in `harness/`, and the reference server stays apart.

Read from the source (every `import` statement, also those inside functions or under
`TYPE_CHECKING`), not from what happens to be imported at run time, so an import added
in a rarely taken branch is caught as well.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness_run import ROOT

PACKAGE = ROOT / "harness"
SHOP = "harness.shop"
SHOP_MAY_IMPORT = {"harness.metrics.instrument", "harness.mrtr.reasons", "harness.config.durations",
                   "harness.config.replica_knobs",
                   "harness.mrtr.keys", "harness.secrets", "harness.errors", "harness.vocabulary",
                   "harness.telemetry", "harness.telemetry.switch"}
"""What the shop may use of the harness: the rejection exporter, the switch every process reads to know whether
OpenTelemetry export is on, and the stdlib-only leaves it needs."""


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    """`name` or its closest enclosing package that is a module of the harness."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Each harness module -> the harness modules it imports anywhere in its text."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, *([base] if base else [])])
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            for target in targets:
                module = _known(target, known)
                if module is not None and module != name:
                    graph[name].add(module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_the_harness():
    assert cycles(import_graph()) == []


def test_the_shop_imports_only_the_instrument_and_stdlib_leaves_of_the_harness():
    graph = import_graph()
    shop = {name for name in graph if name == SHOP or name.startswith(SHOP + ".")}
    outside = reachable(graph, shop) - shop - {"harness"}
    assert outside <= SHOP_MAY_IMPORT, {name: sorted(graph[name] - shop) for name in shop if graph[name] - shop}


def test_the_zygote_never_imports_the_command_line():
    graph = import_graph()
    assert "harness.cli.main" not in reachable(graph, {"harness.targets.zygote"})


@pytest.mark.parametrize("argv", [
    ["validate", "scenarios/smoke.toml"],
    ["report", "--help"],
    ["compare", "--help"],
    ["triage", "--help"],
    ["init", "--help"],
])
def test_commands_that_only_read_load_no_gevent_and_no_locust(argv: list[str]) -> None:
    """Checking a scenario or asking for help must not pay for (or be broken by) the load process's runtime."""
    probe = ("import runpy, sys\n"
             f"sys.argv = ['mrtr-harness', *{argv!r}]\n"
             "try:\n    runpy.run_module('harness', run_name='__main__')\nexcept SystemExit as end:\n"
             "    code = end.code\n"
             "print(code, 'gevent' in sys.modules, 'locust' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.stderr.split()[-3:] == ["0", "False", "False"], done.stderr[-2000:]
