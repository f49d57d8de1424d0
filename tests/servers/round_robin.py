"""A round-robin TCP balancer for tests: each accepted connection goes to the next backend.

Like HAProxy with `http-reuse never` in front of replicas with no sticky sessions: the
harness's client, given one URL, sends each round on a connection of its own, so the rounds
of one call land on different replicas. Bytes are copied both ways untouched (it adds no
header: the replicas name themselves). Run: `python -m tests.servers.round_robin --port P
--backend 127.0.0.1:8101 --backend 127.0.0.1:8102`.
"""

from __future__ import annotations

import argparse
import itertools
import socket
import threading


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until the source closes, then close the sink's writing half (so the other side sees the end)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(port: int, backends: list[tuple[str, int]]) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    turns = itertools.cycle(backends)
    while True:
        client, _ = listener.accept()
        try:
            backend = socket.create_connection(next(turns), timeout=5)
        except OSError:
            client.close()
            continue
        backend.settimeout(None)
        for source, sink in ((client, backend), (backend, client)):
            threading.Thread(target=pipe, args=(source, sink), daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", action="append", required=True, help="host:port, repeatable")
    args = parser.parse_args()
    serve(args.port, [(host, int(port)) for host, _, port in (b.rpartition(":") for b in args.backend)])


if __name__ == "__main__":
    main()
