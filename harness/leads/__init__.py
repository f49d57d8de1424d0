"""Simulated leads: the people who answer a server's questions between MRTR rounds.

Pure and deterministic: think-time distributions (`think`), answers built from a form's
schema (`answers`), the per-round decision (`lead`) and per-flow random streams
(`seeding`). The caller sleeps and sends; nothing here touches time or the network.
"""
