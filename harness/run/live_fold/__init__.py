"""The run's live fold of its journal: `worker` (the fold process), `client` (the run's side of its pipe), and
`protocol` (the one interface both use: every query with its reply type, and the frames on the pipe)."""
