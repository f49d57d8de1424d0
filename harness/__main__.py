"""`python -m harness` runs the same command line as the `mrtr-harness` script."""

from harness.cli import main

raise SystemExit(main())
