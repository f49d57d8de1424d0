"""The harness's own processes: the children it starts (`children`), and timers on a load process's wake-ups."""
