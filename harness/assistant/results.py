"""What each tool of `mrtr-harness mcp` answers: one pydantic model per tool, sent as structured content.

The SDK derives each tool's output schema from its model, so an assistant reads the verdict,
the exit code (as docs/exit-codes.md gives it for the command the tool ran) and the paths
written by name, not from a table meant for a terminal. Every text of every answer (a run's
output, its problems, a log's counts) passes `harness.foreign_text.agent` as the model is
made: what a server or a log said reaches the agent, and the terminal it shows it on, as data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from harness import foreign_text
from harness.compare.outputs import COMPARE_HTML, COMPARE_JSON, COMPARE_JUNIT
from harness.report import JUNIT_XML, REPORT_HTML, SUMMARY_JSON

OUTPUT_CHARS = 8000
"""The most of a command's own output a result carries (its end, where the verdict is)."""


def for_agent(value: Any) -> Any:
    """`value` with every string in it (keys of a mapping too) made safe for an agent; other values as they are."""
    if isinstance(value, str):
        return foreign_text.agent(value)
    if isinstance(value, list | tuple):
        return [for_agent(item) for item in value]
    if isinstance(value, dict):
        return {for_agent(key): for_agent(item) for key, item in value.items()}
    return value


class Answer(BaseModel):
    """What every tool answers with: each field's text passed through `for_agent` before it is checked."""

    @field_validator("*", mode="before")
    @classmethod
    def _foreign_text_is_data(cls, value: Any) -> Any:
        return for_agent(value)


class ValidateResult(Answer):
    """`validate SCENARIO`: whether the file is valid, and the lines `validate` said."""

    valid: bool = Field(description="exit_code is 0")
    exit_code: int = Field(description="validate's exit code: 0 valid, 2 not (docs/exit-codes.md)")
    lines: list[str] = Field(description="what validate printed: `PATH: ok (...)` and the remote-target rules")
    messages: list[str] = Field(description="its errors (each naming file, line and field) and warnings")


class RunFiles(Answer):
    """A run's results folder and the verdict files in it (null when not written)."""

    folder: str | None = Field(default=None, description="the run's results folder")
    summary_json: str | None = Field(default=None, description="summary.json: every figure and check")
    report_html: str | None = Field(default=None, description="report.html: the page a person opens")
    junit_xml: str | None = Field(default=None, description="junit.xml: the checks as test cases")


class Verdict(Answer):
    """A run's verdict as its summary.json holds it, judged by the exit code the tool's own command gave.

    `passed` is never a guess: it is null (and `not_judged` says why) when no verdict was
    computed, a folder that could not be rebuilt or a run that wrote no summary.json, whatever
    an older summary.json in the folder says.
    """

    status: str | None = Field(default=None, description="completed, failed, deviated, aborted, interrupted or "
                                                         "errored (null when no verdict was computed)")
    passed: bool | None = Field(default=None, description="the run passed: exit code 0; null when no verdict was "
                                                          "computed (`not_judged` says why)")
    problems: list[str] = Field(default_factory=list, description="one line per thing that failed")
    not_judged: str | None = Field(default=None, description="why there is no verdict (passed is null): what the "
                                                             "command said")


class RunResult(Verdict, RunFiles):
    """`run SCENARIO`: started or refused (and why), then the verdict, the exit code and the files written."""

    started: bool = Field(description="whether the run was started (false: refused, nothing sent)")
    refused: str | None = Field(default=None, description="why nothing was started")
    exit_code: int = Field(description="the run's exit code (docs/exit-codes.md); 2 when refused")
    allowed_hosts: list[str] = Field(default_factory=list,
                                     description="remote hosts the user agreed chaos or fuzzing may act on, passed "
                                                 "to the run as --allow-host")
    output: str = Field(default="", description="the end of the run's own output: the closing table and its lines")


class ReportResult(Verdict, RunFiles):
    """`report DIR` (rebuilt) or the folder's summary.json as it stands (read)."""

    rebuilt: bool = Field(description="whether summary.json, junit.xml and report.html were rebuilt from the journal")
    exit_code: int = Field(description="the exit code the verdict gives (docs/exit-codes.md, `report`)")
    output: str = Field(default="", description="the closing table (rebuilt), or why the folder could not be read")


class CompareResult(Answer):
    """`compare BASELINE CURRENT`: regressions, the exit code and the files written."""

    exit_code: int = Field(description="compare's exit code: 0 no regression, 1 a regression, 2 bad input")
    regressed: bool | None = Field(description="whether the comparison found a regression (exit 1); null when no "
                                               "comparison was made (exit 2: `output` says why)")
    regressions: list[str] = Field(description="the metrics that regressed")
    warnings: list[str] = Field(description="what the comparison could not see for itself (the same run twice)")
    compare_json: str | None = Field(description="compare.json: every metric with its verdict")
    compare_html: str | None = Field(description="compare.html: the distributions side by side")
    compare_junit: str | None = Field(description="compare-junit.xml: one case per metric")
    output: str = Field(description="compare's table, or why it could not compare")


class TriageResult(Answer):
    """`triage --once --json` on a log file or given text: the rejections by reason and replica."""

    exit_code: int = Field(description="triage's exit code: 0 nothing alarming, 1 a reason that means tampering or "
                                        "a client bug, 2 not a log, 3 the file could not be read (or was refused: "
                                        "outside the workspace, not a regular file)")
    lines: int = Field(description="log lines read")
    rejections: int = Field(description="-32602 rejections the log gave a reason for")
    by_reason: dict[str, int] = Field(description="rejections by the reason the replica logged")
    tampering_or_client_bug: list[str] = Field(description="the reasons seen that mean tampering or a client bug")
    said: list[str] = Field(description="what triage said beside the counts: notices, a source's error")
    counts: dict[str, Any] | None = Field(description="everything `triage --json` prints: per replica, first and "
                                                      "last seen, the likely cause and next step per reason, and "
                                                      "its latest trace ids when the lines carried them")


def tail(text: str) -> str:
    """The end of a command's output, at most `OUTPUT_CHARS`."""
    return text if len(text) <= OUTPUT_CHARS else "…" + text[-OUTPUT_CHARS:]


def existing(path: Path) -> str | None:
    return str(path) if path.is_file() else None


def run_files(folder: Path | None) -> RunFiles:
    """The results folder's verdict files that are there."""
    if folder is None:
        return RunFiles()
    return RunFiles(folder=str(folder), summary_json=existing(folder / SUMMARY_JSON),
                    report_html=existing(folder / REPORT_HTML), junit_xml=existing(folder / JUNIT_XML))


def read_verdict(folder: Path | None) -> tuple[Verdict, int | None]:
    """The verdict in the folder's summary.json, and the exit code it gives; with no readable one, no verdict
    (passed null, `not_judged` saying so) and None."""
    if folder is None:
        return Verdict(not_judged="no results folder was written"), None
    try:
        summary = json.loads((folder / SUMMARY_JSON).read_text(encoding="utf-8"))
        code = summary["exit_code"]
        if isinstance(code, bool) or not isinstance(code, int):
            raise TypeError("exit_code is no exit code")
        compare = summary.get("compare")
        if isinstance(compare, dict) and compare.get("regressed") and code == 0:
            code = 1  # a regression `run --baseline` folded in
        return Verdict(status=str(summary["status"]), passed=code == 0,
                       problems=[str(line) for line in summary.get("problems", [])]), code
    except (OSError, ValueError, KeyError, TypeError):
        return Verdict(not_judged=f"{folder / SUMMARY_JSON} is missing or not a summary this harness wrote"), None


def judged_by(verdict: Verdict, exit_code: int) -> Verdict:
    """The verdict a command just wrote, passed by the exit code it gave (a journal too damaged to trust exits 4
    whatever summary.json says); no verdict stays none."""
    if verdict.not_judged is not None:
        return verdict
    return verdict.model_copy(update={"passed": exit_code == 0})


def not_judged(why: str) -> Verdict:
    """No verdict: passed null, and why."""
    return Verdict(not_judged=why)


def compare_files(folder: Path) -> dict[str, Any]:
    """compare.json's regressions and warnings, and the files a comparison wrote into `folder` (whether it
    regressed is the exit code's to say)."""
    try:
        written = json.loads((folder / COMPARE_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        written = {}
    return {"regressions": list(written.get("regressions", [])),
            "warnings": list(written.get("warnings", [])), "compare_json": existing(folder / COMPARE_JSON),
            "compare_html": existing(folder / COMPARE_HTML), "compare_junit": existing(folder / COMPARE_JUNIT)}
