"""`mrtr-harness mcp`: the harness as an MCP server (stdio), for an assistant: validate, run, report, compare, triage.

`cli` is the subcommand (argparse only: the command line builds every parser on each start);
`server` is the SDK's own `MCPServer` with one tool per job; `consent` asks the user, in the
tool's own multi-round request (MRTR), before a run breaks a host that is not this machine;
`children` runs the harness's own commands as child processes; `results` are the tools'
structured results.
"""
