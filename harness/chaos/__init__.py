"""Chaos: the `[[chaos]]` schedule, each action written once against the `Target` interface, and rollback."""
