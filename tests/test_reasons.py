"""The one parser of the SDK's rejection line, on the shapes the line takes in the field."""

from harness.mrtr.reasons import OTHER_REASON, REASONS, parse_rejection


def test_every_sdk_reason_parses_from_the_bare_message():
    for reason in REASONS:
        assert parse_rejection(f"requestState rejected on tools/call: {reason}") == ("tools/call", reason)


def test_a_whole_formatted_line_parses():
    line = ("2026-11-30T05:12:57.934Z WARNING replica=r1 mcp.server.request_state: "
            "requestState rejected on resources/read: unknown key")
    assert parse_rejection(line) == ("resources/read", "unknown key")


def test_a_custom_principal_message_counts_as_a_principal_binding_error():
    line = "requestState rejected on tools/call: bind_principal returned int, expected str or None"
    assert parse_rejection(line)[1] == "principal binding error"


def test_an_unknown_reason_still_counts_as_other():
    assert parse_rejection("requestState rejected on tools/call: cosmic rays") == ("tools/call", OTHER_REASON)


def test_lines_without_a_rejection_are_ignored():
    assert parse_rejection("INFO uvicorn: Started server process [5926]") is None
