"""Every matcher that reads outside text runs in linear time and says what the patterns it replaced said.

The patterns of 512d30e are kept here as the reference: on short texts drawn from the characters
each one cares about, the linear matcher gives exactly their output. That the new ones are
linear is shown by their structure (no pattern starts with an unbounded run that each position
rescans) and timed in `benchmarks/linear_matching.py`, never here.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from harness import secrets
from harness.logs import parse
from harness.mrtr import error_text, reasons

_NAMES = r"(?:api[_\-]?key|key|token|secret|password|passwd|credentials?)"
_VALUE = r"(?!<)[^\s,;\"'&]+"

OLD_LINE = re.compile(r"requestState rejected on (?P<method>[\w/]+): (?P<reason>.+?)\s*$")
OLD_RICH_PATH = re.compile(r"\s+[\w.\-]+\.py:\S*\s*$")
OLD_TRACE_FIELDS = re.compile(r"(?i)[\s,;]*\"?[\w.]*(?:trace[_.]?id|span[_.]?id|traceparent)\"?\s*[=:]\s*\"?"
                              r"[0-9a-f][0-9a-f-]{15,54}\"?")
OLD_JWT = re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*")
OLD_ASSIGNMENT = re.compile(rf"(?i)(?<![A-Za-z0-9])((?:[A-Za-z0-9]+[_\-.])*{_NAMES}[\"']?\s*=\s*[\"']?){_VALUE}")
OLD_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/@:]*):[^\s/@]+@")
OLD_RULES = (
    (re.compile(r"v1\.[A-Za-z0-9_\-]{8,}={0,2}"), "<requestState>"),
    (OLD_JWT, "<token>"),
    (re.compile(r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)[^\r\n\"']*"), r"\1<redacted>"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 <token>"),
    (OLD_ASSIGNMENT, r"\1<redacted>"),
    (re.compile(rf"(?i)(?<![\w\-.])((?:client|access|refresh|id)?[_\-]?{_NAMES}[\"']?\s*:\s*[\"']?){_VALUE}"),
     r"\1<redacted>"),
    (re.compile(r"(?<!\S)(-u\s*|--user[\s=]+|--proxy-user[\s=]+)([\"']?)([^\s:\"']*):[^\s\"']+"),
     r"\1\2\3:<redacted>"),
    (OLD_USERINFO, r"\1\2:<redacted>@"),
)
"""The scrubber's rules at 512d30e, in their order."""
OLD_ID = re.compile(r"\b(?=[\w\-]*\d)(?=[\w\-]*[A-Za-z])[A-Za-z0-9][\w\-]*")


def texts(*pieces: str, extra: str = " \t\n,;:.=-_\"'/@é٣ſİıK\u212aS0a9Z") -> st.SearchStrategy[str]:
    """Short texts made of the pieces a matcher looks for and the characters around them."""
    return st.lists(st.sampled_from([*pieces, *extra]), max_size=24).map("".join)


SETTINGS = settings(max_examples=300, deadline=None)


@SETTINGS
@given(texts("requestState rejected on ", "tools/call", ": ", "seal", "  ", "\n"))
def test_the_rejection_line_is_read_as_the_pattern_read_it(text):
    match = OLD_LINE.search(text) if "requestState rejected on " in text else None
    expected = None if match is None else (match["method"], match["reason"].strip().strip('"'))
    assert reasons.rejection_parts(text) == expected


@SETTINGS
@given(texts("request_state.py:263", ".py:", "a.py:2…", "   ", "x"))
def test_richs_path_column_is_taken_off_as_the_pattern_took_it(text):
    assert parse._without_rich_path(text) == OLD_RICH_PATH.sub("", text)


@SETTINGS
@given(texts("trace_id", "span.id", "traceparent", "TRACEID", "0af7651916cd43dd", "8448eb211c80319c",
             "00-", "-01", "=", ": ", '"', "otel.", ", "))
def test_trace_fields_are_taken_out_as_the_pattern_took_them(text):
    assert parse._without_trace_fields(text) == OLD_TRACE_FIELDS.sub("", text)


@SETTINGS
@given(texts("eyJ", "hbG", ".", "-", "_", "eyJa.b.c", "é"))
def test_jwts_are_found_as_the_pattern_found_them(text):
    assert secrets._JWT.apply(text) == OLD_JWT.sub("<token>", text)


@SETTINGS
@given(texts("MCP_CLIENT_", "SECRET", "secret", "api_key", "key", "token", "x", "=", " = ", '"', "<", "_", ".",
             "-", "&"))
def test_secret_assignments_are_redacted_as_the_pattern_redacted_them(text):
    assert secrets._ASSIGNMENT.apply(text) == OLD_ASSIGNMENT.sub(r"\1<redacted>", text)


@SETTINGS
@given(texts("https", "git+ssh", "://", "user", ":", "pass", "@", "/", "a.b", "-"))
def test_a_urls_password_is_redacted_as_the_pattern_redacted_it(text):
    assert secrets._USERINFO.apply(text) == OLD_USERINFO.sub(r"\1\2:<redacted>@", text)


@SETTINGS
@given(texts("Authorization", "proxy-", "BEARER", "Basic", "abcdefgh123", "client_", "access", "Secret", "token",
             "KEY", ":", "=", " ", '"', "'", "-u", "--user", "@", "https://", "v1.", "eyJ", ".", "<"))
def test_the_whole_scrubber_redacts_as_the_patterns_redacted(text):
    expected = text
    for pattern, placeholder in OLD_RULES:
        expected = pattern.sub(placeholder, expected)
    got = text
    for rule in secrets._RULES:
        got = rule.apply(got)
    assert got == expected


@SETTINGS
@given(texts("O-1001", "abc", "-", "_", "42", "x9", "٣", "<uuid>"))
def test_ids_are_found_as_the_pattern_found_them(text):
    assert error_text._ID.sub(error_text._id_or_kept, text) == OLD_ID.sub("<id>", text)


def test_no_pattern_that_reads_outside_text_starts_with_a_run_every_position_rescans():
    """Structural: no pattern left starts with an unbounded run (the cause of the quadratic time the old ones took),
    so each position costs a bounded look; where a run may hold many starts, a failed start skips the run."""
    leading_run = re.compile(r"^(?:\(\?[a-z]+\))?(?:\\s|\\w|\\S|\[[^\]]*\])[*+]")
    patterns = [parse._TRACE_FIELD, *(rule.pattern for rule in secrets._RULES),
                *(pattern for pattern, _ in error_text._PATTERNS if pattern is not None), error_text._ID]
    for pattern in patterns:
        assert leading_run.match(pattern.pattern) is None, pattern.pattern
    for old in (OLD_TRACE_FIELDS, OLD_RICH_PATH):
        assert leading_run.match(old.pattern) is not None, old.pattern  # what the check would have caught
