"""A results folder from elsewhere runs no code: a hostile snapshot is ignored with one line, and the journal decides.

Each snapshot here is planted beside a real journal, as someone handing on a results folder
could: a pickle that builds and calls a function (the dotted-name trick an allow-list of types
let through), JSON naming callables and classes, values of the wrong type, sizes of another
journal, truncated and oversized files. What a user checks: nothing ran (a marker file the
payloads would write is never written), and the summary is the journal's own fold.
"""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.config.scenario import parse_scenario
from harness.folding.read import read_saved
from harness.folding.snapshot import MAX_BYTES, SNAPSHOT
from harness.report import journal_parts, rebuild_results
from tests.harness_run import ROOT
from tests.test_report import write_run
from tests.test_snapshot import SCENARIO, _folder, _summary


def _code_running_pickle(marker: Path) -> bytes:
    """A protocol-4 pickle that builds a function from a code object and calls it (it writes `marker`), reaching
    FunctionType and CodeType only by dotted names under the harness's own figures module."""
    code = compile(f"open({str(marker)!r}, 'w').close()", "snapshot", "exec")
    arguments = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_nlocals,
                 code.co_stacksize, code.co_flags, code.co_code, code.co_consts, code.co_names, code.co_varnames,
                 code.co_filename, code.co_name, code.co_qualname, code.co_firstlineno, code.co_linetable,
                 code.co_exceptiontable, code.co_freevars, code.co_cellvars)

    def named(name: str) -> bytes:  # SHORT_BINUNICODE module, SHORT_BINUNICODE name, STACK_GLOBAL
        module = b"harness.folding.figures"
        return b"\x8c" + bytes([len(module)]) + module + b"\x8c" + bytes([len(name)]) + name.encode() + b"\x93"

    body = pickle.dumps(arguments, protocol=3)[2:-1]  # the arguments' tuple, without its header and STOP
    return (b"\x80\x04" + named("RunFigures.add.__class__") + b"(" + named("RunFigures.add.__code__.__class__")
            + body + b"R}tR)R.")  # CodeType(*arguments); FunctionType(code, {}); and call it


def _truth(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The journal's own summary, and the good snapshot a report saved from it (parsed)."""
    rebuild_results(folder)
    return _summary(folder), json.loads((folder / SNAPSHOT).read_bytes())


def _report(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], list[str]]:
    """Rebuild the folder's results from what is in it now: (summary.json, the lines on standard error)."""
    capsys.readouterr()
    (folder / "summary.json").unlink()
    rebuild_results(folder)
    return _summary(folder), capsys.readouterr().err.splitlines()


def test_a_pickle_that_runs_code_is_never_unpickled_whatever_its_name(tmp_path):
    folder, _ = _folder(tmp_path)
    expected, _ = _truth(folder)
    proof = tmp_path / "unpickled"
    pickle.loads(_code_running_pickle(proof))
    assert proof.exists(), "the planted file must run code when unpickled, or this test proves nothing"
    marker = tmp_path / "ran"
    for name in (SNAPSHOT, "figures.pickle"):
        (folder / name).write_bytes(_code_running_pickle(marker))
    (folder / "summary.json").unlink()
    report = subprocess.run([sys.executable, "-m", "harness", "report", str(folder)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert not marker.exists()
    assert _summary(folder) == expected and report.returncode == expected["exit_code"]
    assert [line for line in report.stderr.splitlines() if SNAPSHOT in line] == [
        f"mrtr-harness: {folder / SNAPSHOT} ignored (not JSON); the figures are folded from the journal"]


def _inflated(state: dict[str, Any]) -> dict[str, Any]:
    """The good snapshot with every finished flow counted ten times: were it taken, the summary would show it."""
    figures = state["folded"]["figures"]
    figures["finished"] = [[key, count * 10] for key, count in figures["finished"]]
    return state


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Plant `value` at a path (keys and list indices, `/` between them) of the (inflated) snapshot."""
    def plant(state: dict[str, Any]) -> dict[str, Any]:
        *steps, last = path.split("/")
        here: Any = _inflated(state)
        for step in steps:
            here = here[int(step)] if isinstance(here, list) else here[step]
        if isinstance(here, list):
            here[int(last)] = value
        else:
            here[last] = value
        return state
    return plant


TOUCH = "touch {marker}"
HOSTILE_JSON: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "a callable by name": _set("folded/figures", {"__reduce__": ["os.system", [TOUCH]]}),
    "jsonpickle's names": _set("folded", {"py/object": "harness.folding.read.JournalRead",
                                          "py/reduce": [{"py/function": "os.system"}, {"py/tuple": [TOUCH]}]}),
    "a dotted name for a value": _set("folded/figures/status", {"__class__": "harness.folding.figures.RunFigures"
                                                                             ".add.__class__", "args": [TOUCH]}),
    "a dotted name for the kind": _set("kind", "harness.folding.read.JournalRead.add.__globals__"),
    "an unknown class for a sketch": _set("folded/figures/think_time", {"class": "collections.OrderedDict",
                                                                        "module": "os", "call": "system"}),
    "an extra field naming a callable": _set("folded/checks/__class__", "os.system"),
    "a field missing": lambda state: (_inflated(state)["folded"]["timeline"].pop("stored"), state)[1],
    "another format": _set("format", 5),
    "a count as a string": _set("folded/figures/rounds", "60"),
    "a float where a count belongs": _set("folded/records", 1.5),
    "a counter's count as a string": _set("folded/figures/rejections/0/1", "1"),
    "a list where a counter belongs": _set("folded/figures/replica_rounds", [1, 2]),
    "a key twice": lambda state: (_inflated(state)["folded"]["figures"]["finished"].append(
        state["folded"]["figures"]["finished"][0]), state)[1],
    "a sketch's count negative": _set("folded/figures/think_time/count", -1),
    "a sketch whose bins do not add up": _set("folded/figures/think_time/bins", [1, 2, 3]),
    "a sketch's bin far outside its keys": _set("folded/figures/think_time/key", 10 ** 9),
    "a non-finite number by name": _set("folded/figures/late", "inf"),
    "sizes longer than the journal": _set("parts/journal.jsonl", 10 ** 12),
    "a part the journal does not have": _set("parts", {"../../etc/passwd": 10}),
    "ends that are not base64": _set("ends", {"journal.jsonl": "&&not base64&&"}),
    "ends of other bytes": _set("ends", {"journal.jsonl": base64.b64encode(b"other bytes").decode()}),
}


@pytest.mark.parametrize("planted", HOSTILE_JSON, ids=list(HOSTILE_JSON))
def test_a_json_snapshot_that_is_not_the_figures_shape_is_ignored_and_the_journal_decides(tmp_path, capsys, planted):
    folder, _ = _folder(tmp_path)
    expected, state = _truth(folder)
    marker = tmp_path / "ran"
    text = json.dumps(HOSTILE_JSON[planted](state)).replace(TOUCH, TOUCH.format(marker=marker))
    (folder / SNAPSHOT).write_text(text)
    summary, errors = _report(folder, capsys)
    assert not marker.exists()
    assert summary == expected
    assert len(errors) == 1 and f"{folder / SNAPSHOT} ignored (" in errors[0], errors


@pytest.mark.parametrize("planted", ["truncated", "oversized", "empty", "deeply nested", "a list", "null"])
def test_a_snapshot_cut_short_too_large_or_not_an_object_is_ignored(tmp_path, capsys, planted):
    folder, _ = _folder(tmp_path)
    expected, state = _truth(folder)
    good = json.dumps(_inflated(state)).encode()
    data = {"truncated": good[: len(good) // 2], "oversized": good + b" " * MAX_BYTES, "empty": b"",
            "deeply nested": b"[" * 100_000 + b"]" * 100_000, "a list": b"[]", "null": b"null"}[planted]
    (folder / SNAPSHOT).write_bytes(data)
    summary, errors = _report(folder, capsys)
    assert summary == expected
    assert len(errors) == 1 and f"{folder / SNAPSHOT} ignored (" in errors[0], errors


def test_the_inflated_snapshot_of_these_tests_would_show_were_it_taken(tmp_path, capsys):
    """The other tests' premise: a well-formed snapshot is taken as it is (only the journal's bytes are checked),
    so each hostile one above differs from it only by what makes it hostile."""
    folder, _ = _folder(tmp_path)
    expected, state = _truth(folder)
    (folder / SNAPSHOT).write_text(json.dumps(_inflated(state)))
    summary, errors = _report(folder, capsys)
    assert summary["flows"]["total"] == 10 * expected["flows"]["total"] and errors == []


def test_a_fold_holding_a_record_value_of_the_wrong_type_is_not_saved_and_the_journal_decides(tmp_path, capsys):
    """A `run end` whose reason is no text: the figures have no plain form, so they are not saved (one line says
    so) and the next report folds the journal."""
    folder = tmp_path / "run-0007"
    folder.mkdir()
    (folder / "scenario.json").write_text(parse_scenario(SCENARIO).model_dump_json())
    write_run(folder / "journal.jsonl", end_status="aborted", end_reason=["stopped", {"by": "a list"}])  # type: ignore[arg-type]
    rebuild_results(folder)
    errors = capsys.readouterr().err.splitlines()
    assert not (folder / SNAPSHOT).exists() and len(errors) == 1 and "not saved" in errors[0], errors
    assert read_saved(folder, journal_parts(folder)) is None
    expected = _summary(folder)
    summary, _ = _report(folder, capsys)
    assert summary == expected and summary["status"] == "aborted"


def test_compare_never_unpickles_a_planted_snapshot_either(tmp_path):
    """`compare` reads both folders' snapshots through the same reader: planted in both, nothing runs and the
    comparison is the one the journals give."""
    import shutil

    folder, _ = _folder(tmp_path)
    _truth(folder)
    baseline, current = tmp_path / "baseline", tmp_path / "current"
    shutil.copytree(folder, baseline)
    shutil.copytree(folder, current)

    def compare(output: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "harness", "compare", str(baseline), str(current), "--output",
                               str(output)], capture_output=True, text=True, cwd=ROOT, timeout=120)

    honest = compare(tmp_path / "honest")
    marker = tmp_path / "ran"
    for side in (baseline, current):
        for name in (SNAPSHOT, "figures.pickle"):
            (side / name).write_bytes(_code_running_pickle(marker))
    planted = compare(tmp_path / "planted")
    assert not marker.exists()
    assert planted.returncode == honest.returncode
    verdicts = [json.loads((tmp_path / name / "compare.json").read_text())["metrics"] for name in ("honest", "planted")]
    assert verdicts[0] == verdicts[1]
    assert {line for line in planted.stderr.splitlines() if SNAPSHOT in line} == {
        f"mrtr-harness: {side / SNAPSHOT} ignored (not JSON); the figures are folded from the journal"
        for side in (baseline, current)}
