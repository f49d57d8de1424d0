"""The journal, the one contract between a run and everything that reports on it.

`records` (every record type, documented in docs/journal.md), `writer` (the file a run
appends to and the reader of it) and `figures` (what the thresholds, the summary and the
reports read off the records).
"""
