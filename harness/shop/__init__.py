"""The reference MRTR deployment under test: the shop's API and its replicated MCP server.

It ships with the harness so the main job runs out of the box, and every failure mode
in the on-call table can be reproduced on demand by starting replicas differently.
"""
