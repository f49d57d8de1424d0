"""Every command's exit codes, in one table: docs/exit-codes.md and each `--help` are written from it.

The codes are `harness.errors.ExitCode`; what each one means differs a little by command
(`compare` fails on a regression, `triage` on a reason that means tampering), so the table
is by command. `python -m harness.cli.reference` writes it into docs/exit-codes.md and every
parser's epilog is `epilog(command)`, so the documents and `--help` cannot disagree.
"""

from __future__ import annotations

import textwrap

from harness.errors import ExitCode

MAIN = "mrtr-harness"
"""The key of the table's general rows: what each code means for every command (the main `--help`)."""

TABLE: dict[str, tuple[tuple[ExitCode, str], ...]] = {
    MAIN: (
        (ExitCode.PASSED, "passed"),
        (ExitCode.FAILED, "a verdict that failed: a check, a regression, a reason that means tampering"),
        (ExitCode.USAGE, "bad scenario, command line or input: nothing was started"),
        (ExitCode.TARGET, "the target (or a log source, a token endpoint, a master) could not be started or reached"),
        (ExitCode.HARNESS, "the harness itself failed"),
        (ExitCode.INTERRUPTED, "interrupted (Ctrl-C or SIGTERM): never a verdict"),
    ),
    "run": (
        (ExitCode.PASSED, "passed: every threshold, invariant, reconciliation and hypothesis check held (with "
                          "--reproduce the thresholds are [reproduces]: the failure reproduced)"),
        (ExitCode.FAILED, "failed: a threshold, an invariant, the reconciliation, the hypothesis or a chaos action "
                          "failed, or the run aborted itself (abort_on_violation), or with --baseline a regression "
                          "(summary.json `status` and `problems` say which; with --reproduce: the failure did not "
                          "reproduce)"),
        (ExitCode.USAGE, "bad scenario or command line, a --baseline missing (the first night takes "
                         "--first-baseline) or not a results folder of this scenario, a secret's variable unset, "
                         "chaos or fuzzing against a host not in [target] allow or --allow-host, a token or client "
                         "secret over plain http off this machine, --web off loopback without MRTR_WEB_PASSWORD, "
                         "--reproduce on a scenario without [reproduces], --master without MRTR_CLUSTER_SECRET: "
                         "nothing was started"),
        (ExitCode.TARGET, "the target, a token endpoint or the workers could not be started or reached (workers "
                          "that never came within --expect-workers-max-wait), or a log source was lost while -32602s "
                          "it should explain came in: reconciliation not judged (status aborted; summary.json "
                          "reconciliation.not_judged and unobserved say whose log from when)"),
        (ExitCode.HARNESS, "the harness itself failed, a Locust worker was lost before it finished (named: it quit, "
                           "its process exited or its heartbeats stopped, before or during the load), its journal "
                           "has lines that could not be read (status errored, results still written, everything "
                           "stopped), or a symbolic link was planted in its results folder while it ran (named, never "
                           "written through)"),
        (ExitCode.INTERRUPTED, "interrupted: Ctrl-C or SIGTERM (what CI runners and Kubernetes send to cancel), "
                               "status interrupted, results still written, not compared with --baseline; the web UI's "
                               "STOP (`--web`) ends a run the same way"),
    ),
    "report": (
        (ExitCode.PASSED, "the rebuilt verdict passed"),
        (ExitCode.FAILED, "the rebuilt verdict failed (a regression `run --baseline` recorded included)"),
        (ExitCode.USAGE, "not a run's results folder, or a journal part that is no journal (named), or --judge "
                         "reproduces for a scenario without [reproduces], or a symbolic link where a result goes "
                         "(named, never written through)"),
        (ExitCode.TARGET, "the run's target could not be started or reached, or its reconciliation was not judged (a "
                          "log source lost)"),
        (ExitCode.HARNESS, "the run's harness failed, or journal lines could not be read (--lenient exits as the "
                           "verdict says), or a worker's part holds records no worker writes (named; --lenient or "
                           "not)"),
        (ExitCode.INTERRUPTED, "the run was interrupted, or cut off (killed: its journal has no end)"),
    ),
    "validate": (
        (ExitCode.PASSED, "every file is valid"),
        (ExitCode.USAGE, "a file is not (each error names its file, line and field), or it breaks a rule of remote "
                         "targets (chaos or fuzzing against a host not allowed, a secret over plain http)"),
    ),
    "schema": (
        (ExitCode.PASSED, "the scenario file's JSON Schema was printed"),
    ),
    "compare": (
        (ExitCode.PASSED, "no regression"),
        (ExitCode.FAILED, "a regression: a metric worse than its tolerance (and, for samples, significantly), a "
                          "count above the baseline's, a current run that did not complete, a flow, tool or round "
                          "only one run has"),
        (ExitCode.USAGE, "bad input: not a results folder, different scenarios without --force, a bad tolerance, "
                         "a baseline that did not complete, an --output that cannot be written or a symbolic link "
                         "where a file of it goes (named, never written through)"),
    ),
    "history": (
        (ExitCode.PASSED, "no trend beyond its tolerance"),
        (ExitCode.FAILED, "a gated metric drifted the worse way (a significant Mann-Kendall trend beyond its "
                          "tolerance), or cannot be judged: a night that did not complete or whose journal is "
                          "damaged, a flow, tool or round only some nights have"),
        (ExitCode.USAGE, "bad input: fewer nights than a trend needs (6), a folder of another scenario, the same run "
                         "twice, a bad tolerance, an --output that cannot be written or a symbolic link where a "
                         "file of it goes (named, never written through)"),
        (ExitCode.HARNESS, "a night's data is damaged: its summary.json (or scenario.json, journal) missing or not "
                           "what the schema says"),
    ),
    "init": (
        (ExitCode.PASSED, "the scenario was written (or printed)"),
        (ExitCode.USAGE, "a URL that is no MCP server or lists no tool, a tool name outside MCP's rule (1-128 of "
                         "A-Z a-z 0-9 _ - .), a listing whose scenario would not read back as written, a server that "
                         "wants OAuth without --client-id or its secret's variable, an -o file that exists without "
                         "--force or is a symbolic link: nothing written"),
        (ExitCode.TARGET, "a URL could not be reached, or its OAuth discovery or token endpoint failed: nothing "
                          "written"),
    ),
    "capacity": (
        (ExitCode.PASSED, "the sweep completed (whatever it found)"),
        (ExitCode.USAGE, "bad scenario, plan or options (a remote target's rules as `run`'s, --master without "
                         "MRTR_CLUSTER_SECRET)"),
        (ExitCode.TARGET, "the target could not be started or reached"),
        (ExitCode.INTERRUPTED, "interrupted (Ctrl-C or SIGTERM): capacity.json holds the steps that ran"),
    ),
    "hunt": (
        (ExitCode.PASSED, "nothing broke within the budget (trials or time): the coverage is said in one line and "
                          "on hunt.html"),
        (ExitCode.FAILED, "a trial failed the property (an invariant, an unexplained -32602, the steady state "
                          "during or after the chaos, an [expect] threshold with --expect): the failing schedule was "
                          "found, shrunk and journaled, minimal.toml and hunt.html hand it over; or a control trial "
                          "failed it with no chaos at all (\"fails without chaos\": nothing searched)"),
        (ExitCode.USAGE, "bad scenario, [hunt] bounds or flags, or chaos against a host not allowed: nothing was "
                         "started; or --from-triage counted only reasons no drawable action provokes and the control "
                         "trials did not log them either (\"nothing to draw\": nothing searched)"),
        (ExitCode.TARGET, "a trial's target could not be started or reached"),
        (ExitCode.HARNESS, "a trial was the harness's own failure (never the target's), or the minimal scenario "
                           "would not validate, or a symbolic link was planted where the hunt's page or minimal "
                           "scenario goes (never written through): the hunt stops"),
        (ExitCode.INTERRUPTED, "interrupted (Ctrl-C or SIGTERM): the trial under way rolled its chaos back, "
                               "hunt.jsonl and hunt.html hold what was found so far (during the shrink, minimal.toml "
                               "the smallest failing schedule so far, marked not minimal)"),
    ),
    "triage": (
        (ExitCode.PASSED, "no reason that means tampering or a client bug was seen (Ctrl-C or SIGTERM ends a live "
                          "triage with its summary and one of these codes)"),
        (ExitCode.FAILED, "one was: seal, request binding, malformed, non-string requestState"),
        (ExitCode.USAGE, "usage, or a file that is no log (binary, a damaged gzip)"),
        (ExitCode.TARGET, "a source could not be opened or reached, or ended in error (1 wins over 3)"),
    ),
    "mcp": (
        (ExitCode.PASSED, "the client closed the connection (each tool's own exit code is in its result)"),
        (ExitCode.USAGE, "a bad option (--max-duration, a --workspace that is not a folder)"),
        (ExitCode.INTERRUPTED, "interrupted (Ctrl-C)"),
    ),
    "worker": (
        (ExitCode.PASSED, "everything it journaled reached the master"),
        (ExitCode.FAILED, "it did not: the master refused it (another version, one worker too many, another "
                          "MRTR_CLUSTER_SECRET), the master did not prove it holds MRTR_CLUSTER_SECRET (nothing it "
                          "sent was obeyed), or it went away (the spool is kept)"),
        (ExitCode.USAGE, "MRTR_CLUSTER_SECRET is not set: nothing was started"),
        (ExitCode.TARGET, "no master answered"),
        (ExitCode.INTERRUPTED, "interrupted (Ctrl-C)"),
    ),
    "shop": (
        (ExitCode.PASSED, "stopped: `shop up` by Ctrl-C or SIGTERM, `keyring` done"),
        (ExitCode.USAGE, "a bad store, key ring or address"),
        (ExitCode.TARGET, "`shop up`: a part of the deployment could not start"),
        (ExitCode.INTERRUPTED, "`api`, `replica`, `auth-server` stopped by Ctrl-C (by SIGTERM they shut down "
                               "cleanly and end as the signal does: 143 in a shell)"),
    ),
}
"""Each command's codes and what they mean for it; every command also exits 4 on a harness bug."""


def epilog(command: str = MAIN) -> str:
    """The exit codes of `command` as its `--help` ends them: one paragraph, wrapped here so that a parser with a
    raw epilog (triage) shows it as the others do."""
    rows = "; ".join(f"{int(code)} {meaning}" for code, meaning in TABLE[command])
    harness_row = any(code is ExitCode.HARNESS for code, _ in TABLE[command])
    more = ("" if harness_row else "4 on a harness bug, as every command. ") + "See docs/exit-codes.md."
    return textwrap.fill(f"Exit codes: {rows}. {more}", width=78)


def markdown_table() -> str:
    """The table as docs/exit-codes.md holds it: one row per command and code."""
    lines = ["| command | code | meaning |", "|---|---|---|"]
    for command, rows in TABLE.items():
        name = "every command" if command == MAIN else f"`{command}`"
        lines += [f"| {name} | {int(code)} | {_cell(meaning)} |" for code, meaning in rows]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
