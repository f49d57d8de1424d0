"""The deployment under test, behind one interface: embedded processes, containers, external URLs.

A run talks to its target only through `Target`: where the replicas are, where their
logs are, how to break them (chaos) and how to put them back (rollback). What a target
cannot do raises `ChaosUnsupported`, which the run records instead of crashing.
"""
