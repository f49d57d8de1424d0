"""mrtr-harness: load and chaos testing for MCP servers that ask the user mid-call (MRTR, 2026-07-28)."""

__version__ = "0.1.0"
