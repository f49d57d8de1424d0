"""`mrtr-harness init URL [URL...]`: a first scenario for the user's own server, written from what it lists."""
