"""The journal, the one contract between a run and everything that reports on it.

`records` (every record type, documented in docs/journal.md), `writer` (the file a run
appends to and the reader of it), `segments` (that file on disk: closed segments compressed,
the open one plain, read as one stream), `distributions` (the sketches and counts figures keep)
and `plain` (a fold as plain data). What the records add up to is `harness.folding`'s.
"""
