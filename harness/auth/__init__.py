"""The client side of OAuth: each simulated lead's access token, fetched, held and refreshed off the hot path.

`sources` turns `[target.auth]` into a token source (the client-credentials grant, a file of
tokens, a command), `discovery` finds the token endpoint as the MCP authorization spec says,
and `keeper` holds one token per principal for the round loop (`harness.mrtr.credentials`).
"""
