"""The command line: `mrtr-harness` (`main`), the reference shop's parts (`shop`), the generated docs (`reference`).

The subcommands of the tools beside a run (`compare`, `triage`, `capacity`) live with their packages;
`main` assembles them and is the one place where an error becomes an exit code.
"""
