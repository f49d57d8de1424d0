"""`python -m harness` runs the same command line as the `mrtr-harness` script."""

from harness.cli.main import main

raise SystemExit(main())
