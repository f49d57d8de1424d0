"""A folder handed to the harness with a symbolic link planted where it writes: the link is never written through.

Each writer is tried as a user runs it (a subprocess; the hunt's hand-over in process), on a
folder where `report.html` (or the writer's own file) is a link to a victim file outside it:
the victim keeps its bytes, the link stays a link, and the command says so in one line with the
exit code its table gives (2 for a folder the user handed over; 4 for a run's or a hunt's own
fresh folder, where a link can only have been planted while it ran).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.atomic_files import PlantedLink, open_append, write_atomically
from harness.report import rebuild_results
from tests.harness_run import ROOT, SCENARIOS
from tests.test_compare import T0, scenario, write_run
from tests.test_history import DAY, night_folder

VICTIM = b"# the user's own file, which no harness write may touch\n"
SAID = "is a symbolic link: not written"


def harness(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def plant(link: Path, tmp_path: Path) -> Path:
    """`link` made a symbolic link to a victim file outside the folder; the victim returned."""
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    return victim


def untouched(link: Path, victim: Path) -> bool:
    return victim.read_bytes() == VICTIM and link.is_symlink()


def one_run(folder: Path, day: int = 0) -> Path:
    """A results folder as `report` rebuilds it (tests/test_compare.py's journal of typed records)."""
    write_run(folder, scenario(), flows=60, seed=day + 1, t0=T0 + day * DAY)
    rebuild_results(folder)
    return folder


def test_the_helper_refuses_a_link_and_replaces_a_file_whole(tmp_path: Path) -> None:
    victim = plant(tmp_path / "report.html", tmp_path)
    with pytest.raises(PlantedLink, match=SAID):
        write_atomically(tmp_path / "report.html", "<html>")
    with pytest.raises(PlantedLink, match=SAID):
        open_append(tmp_path / "report.html")
    assert untouched(tmp_path / "report.html", victim)
    write_atomically(tmp_path / "summary.json", "{}\n")
    write_atomically(tmp_path / "summary.json", b"{}")
    assert (tmp_path / "summary.json").read_bytes() == b"{}"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["report.html", "summary.json", "victim"]


def test_report_refuses_a_planted_report_html_and_says_so(tmp_path: Path) -> None:
    folder = one_run(tmp_path / "run")
    victim = plant(folder / "report.html", tmp_path)
    done = harness("report", folder)
    assert done.returncode == 2, done.stderr
    assert f"{folder / 'report.html'} {SAID}" in done.stderr
    assert untouched(folder / "report.html", victim)


def test_compare_refuses_a_planted_compare_html_and_says_so(tmp_path: Path) -> None:
    baseline, current = one_run(tmp_path / "baseline"), one_run(tmp_path / "current", 1)
    victim = plant(current / "compare.html", tmp_path)
    done = harness("compare", baseline, current)
    assert done.returncode == 2, done.stderr
    assert f"{current / 'compare.html'} {SAID}" in done.stderr
    assert untouched(current / "compare.html", victim)


def test_history_refuses_a_planted_history_html_and_says_so(tmp_path: Path) -> None:
    nights = [one_run(night_folder(tmp_path / "nights", day + 1), day) for day in range(6)]
    output = tmp_path / "out"
    output.mkdir()
    victim = plant(output / "history.html", tmp_path)
    done = harness("history", *nights, "--output", output)
    assert done.returncode == 2, done.stderr
    assert f"{output / 'history.html'} {SAID}" in done.stderr
    assert untouched(output / "history.html", victim)


def test_init_refuses_a_planted_output_even_with_force_and_tries_no_url(tmp_path: Path) -> None:
    output = tmp_path / "scenario.toml"
    victim = plant(output, tmp_path)
    done = harness("init", "http://127.0.0.1:9/mcp", "-o", output, "--force")
    assert done.returncode == 2, done.stderr
    assert f"{output} {SAID}" in done.stderr and "9/mcp" not in done.stderr
    assert untouched(output, victim)


def test_the_hunts_hand_over_refuses_a_planted_page_as_the_harness_error_it_is(tmp_path: Path) -> None:
    from harness.hunt.search import Hunt
    from harness.hunt.trial import Base
    from tests.test_hunt_search import _scenario_file

    stream = io.StringIO()
    hunt = Hunt(Base.read(_scenario_file(tmp_path)), stream=stream)
    hunt.folder = tmp_path / "hunt"
    hunt.folder.mkdir()
    victim = plant(hunt.folder / "hunt.html", tmp_path)
    hunt._hand_over()
    assert hunt.result.stopped_by == "harness error" and hunt.page_file is None
    assert f"{hunt.folder / 'hunt.html'} {SAID}" in stream.getvalue()
    assert untouched(hunt.folder / "hunt.html", victim)


def test_a_run_whose_report_html_was_planted_while_it_ran_writes_nothing_through_it_and_exits_4(
        tmp_path: Path) -> None:
    """The run's folder is its own, made fresh: a link there was planted while it ran (here as soon as the folder
    is there, seconds before the results are written), so the refusal is the run's harness error (exit 4)."""
    results = tmp_path / "results"
    process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(SCENARIOS / "smoke.toml"), "--results",
                                str(results), "--quiet", "--duration", "5s"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, preexec_fn=lambda: signal.signal(
                                   signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not (folders := [path for path in results.glob("*-smoke") if (path / "scenario.json").is_file()]):
            assert process.poll() is None and time.monotonic() < deadline, "the run made no results folder"
            time.sleep(0.05)
        [folder] = folders
        victim = plant(folder / "report.html", tmp_path)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 4, output
    assert f"{folder / 'report.html'} {SAID}" in output
    assert untouched(folder / "report.html", victim)
    assert (folder / "summary.json").is_file()



def test_the_assistants_compare_makes_no_folder_outside_the_runs_or_its_workspace(tmp_path: Path) -> None:
    """An agent's `output` outside its workspace is refused and nothing made there; inside the run it is written."""
    from tests.test_mcp_server import connect, run_async

    baseline, current = one_run(tmp_path / "baseline"), one_run(tmp_path / "current", 1)
    outside = tmp_path.parent / f"{tmp_path.name}-elsewhere"  # the server's workspace is tmp_path
    elsewhere = outside / "deep"

    async def session() -> None:
        async with connect(tmp_path) as client:
            refused = await client.call_tool("compare", {"baseline": str(baseline), "current": str(current),
                                                         "output": str(elsewhere)})
            assert refused.structured_content is not None, refused.content
            assert refused.structured_content["exit_code"] == 2, refused.structured_content
            assert "outside this server's workspace" in refused.structured_content["output"]
            inside = await client.call_tool("compare", {"baseline": str(baseline), "current": str(current),
                                                        "output": str(current / "vs-baseline")})
            assert not inside.is_error and inside.structured_content is not None, inside.content
            assert inside.structured_content["compare_json"] == str(current / "vs-baseline" / "compare.json")

    run_async(session)
    assert not outside.exists()
