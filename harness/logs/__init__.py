"""Replica logs: where they are read from, which lines are rejections, and the run's collector.

One pipeline serves the run and `mrtr-harness triage`, in the order a line travels:
`spec` (where a log is: `LogSource`, and the scenario's `logs = [...]` entries),
`sources` (files, a command's output, standard input, containers: one `Source`
abstraction), `files` and `containers` (following a file like `tail -F`; a container
through the Docker engine across restarts), `kubernetes` (the pods a label selector finds,
followed as they are replaced), `readers` (every file on one poller, every
stream on its own thread), `parse` (which lines are the SDK's rejections, in plain, rich
and JSON shapes; the reason itself is read by `harness.mrtr.reasons`), `stamps` (when a line
says it was written) and `collector` (the run's: this run's rejections, as events).

Nothing here imports triage, and the Docker SDK is imported only when a container is read.
"""
