"""A run's, a hunt's or a sweep's results folder: fresh every time, even when many start under one root at once."""

from __future__ import annotations

import threading
from pathlib import Path

from harness.run.results_folder import results_folder


def test_processes_that_start_at_once_under_one_root_each_get_a_folder_of_their_own(tmp_path: Path) -> None:
    """Sixteen starts released together (the shares of a hunt, the pods of a job writing to one volume): sixteen
    folders, none shared, each made by the one that was given it."""
    root, made, barrier = tmp_path / "results", [], threading.Barrier(16)

    def start() -> None:
        barrier.wait()
        made.append(results_folder(root, "hunt-shop"))

    threads = [threading.Thread(target=start) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(made) == 16 and len(set(made)) == 16
    assert all(folder.is_dir() and folder.parent == root and "-hunt-shop" in folder.name for folder in made)


def test_a_name_taken_by_a_link_or_a_file_is_passed_over_not_written_through(tmp_path: Path) -> None:
    root = tmp_path / "results"
    first = results_folder(root, "run")
    first.rmdir()
    first.symlink_to(tmp_path / "elsewhere")  # a dangling link where the next folder would go
    second = results_folder(root, "run")
    assert second != first and second.is_dir() and not second.is_symlink()
    assert not (tmp_path / "elsewhere").exists()
