"""How getting tokens fails once the input is there: the endpoint (exit 3).

A secret or token file the machine lacks is bad input, `harness.secrets.MissingSecret` (exit 2).
Neither message ever holds a secret or a token: only names, paths, URLs, and the `error`
field a token endpoint answered with.
"""

from __future__ import annotations

from harness.errors import TargetDown


class TokenEndpointError(TargetDown):
    """No token could be had: the token endpoint (or discovery, or the token command) failed or refused."""
