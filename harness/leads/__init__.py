"""Simulated leads: the people who answer a server's questions between MRTR rounds.

Pure and deterministic: think-time distributions (`think`), answers built from a form's
schema (`answers`) and the per-round decision (`lead`), each drawing from the random stream
it is handed (`harness.load.seeding`). The caller sleeps and sends; nothing here touches
time or the network.
"""
