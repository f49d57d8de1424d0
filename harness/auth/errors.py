"""The two ways getting tokens fails before a run can start: bad input (exit 2), or the endpoint (exit 3).

Neither message ever holds a secret or a token: only names, paths, URLs, and the `error`
field a token endpoint answered with.
"""

from __future__ import annotations

from harness.errors import TargetDown, UsageError


class AuthInputError(UsageError):
    """`[target.auth]` cannot be used as given: a token file missing or with no token (an unset secret's
    variable is `harness.secrets.MissingSecret`)."""


class TokenEndpointError(TargetDown):
    """No token could be had: the token endpoint (or discovery, or the token command) failed or refused."""
