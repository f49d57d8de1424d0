"""`mrtr-harness triage`: the on-call engineer's live breakdown of `-32602` by the reason replicas logged.

The client of an MRTR server sees one `-32602 "Invalid or expired requestState"` whatever
went wrong; the reason exists only in one WARNING line of the replica that refused the
state. Triage reads a running deployment's logs (files followed like `tail -F`, a
command's output, standard input, a compose service's containers), recognises that line
in the SDK's plain, rich and JSON-formatted shapes, counts it by reason and replica over
the last minute and the whole window, and says what each reason most likely means and
what to do next.

Modules, in the order a line travels: `sources` (where lines come from), `parse` (which
lines are rejections), `counts` (per reason and replica, windowed), `advice` (the
on-call table), `display` (the live table, the summary, JSON), `session` (the sources
read on threads into one count) and `cli` (the subcommand).
"""
