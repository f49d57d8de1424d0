"""`mrtr-harness triage`: the on-call engineer's live breakdown of `-32602` by the reason replicas logged.

The client of an MRTR server sees one `-32602 "Invalid or expired requestState"` whatever
went wrong; the reason exists only in one WARNING line of the replica that refused the
state. Triage reads a running deployment's logs (files followed like `tail -F`, a
command's output, standard input, a compose service's containers), recognises that line
in the SDK's plain, rich and JSON-formatted shapes, counts it by reason and replica over
the last minute and the whole window, and says what each reason most likely means and
what to do next.

Where lines come from and which are rejections is the log pipeline's (`harness.logs`,
shared with the run's collector). Here, in the order a line travels on from there:
`session` (the sources read into one count), `counts` (per reason and replica,
windowed), `advice` (the on-call table), `display` (the live table, the summary, JSON)
and `cli` (the subcommand).
"""
