"""`mrtr-harness hunt`: search for the chaos schedule that breaks a deployment, and shrink it to the smallest."""
