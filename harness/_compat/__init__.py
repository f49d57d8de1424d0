"""The harness's edges on other libraries' private parts: one module per library, and nowhere else.

A private name (a method, field or module a library does not promise to keep) may change
in any release. Each module here holds every use the harness makes of one library's
private parts, with what the harness relies on and why; `tests/test_compat.py` checks each
of them against the installed library, and pyproject.toml caps each such library at the
minor release those checks passed on. Raising a cap means running those checks first.

These modules import nothing of the harness.
"""
