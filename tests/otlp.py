"""A real OTLP/HTTP receiver for tests: oteltap on a free 127.0.0.1 port, every span and metric it receives kept.

oteltap is asyncio-based; the receiver runs on an event loop in a thread of its own, so a test (or a
fixture) that is not async starts it, points `OTEL_EXPORTER_OTLP_ENDPOINT` (or `run --otlp`) at `url`,
and reads what arrived with `spans()`, `metrics()` or `wait_for_spans(...)`. Spans arrive as OTLP's
protobuf `Span` (ids as bytes: `hex_id` turns them into the hex the journal and the W3C header use);
the receiver keeps no resource, so tell the harness's spans from a replica's by kind (CLIENT, SERVER).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings
from oteltap.exceptions import OtelTapInitializationError

from tests.servers import free_port

__all__ = ["OtlpReceiver", "attributes", "hex_id", "otlp_receiver"]

SPAN_KIND_SERVER = Span.SpanKind.SPAN_KIND_SERVER
SPAN_KIND_CLIENT = Span.SpanKind.SPAN_KIND_CLIENT
SPAN_KIND_INTERNAL = Span.SpanKind.SPAN_KIND_INTERNAL


def hex_id(raw: bytes) -> str:
    """A trace or span id as lowercase hex, as `traceparent` and the journal write it."""
    return raw.hex()


def attributes(item: Span | Any) -> dict[str, Any]:
    """A span's (or a data point's) attributes as a plain dict of their values."""
    values: dict[str, Any] = {}
    for attribute in item.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        values[attribute.key] = getattr(value, kind) if kind is not None else None
    return values


class OtlpReceiver:
    """What one oteltap receiver has received so far, read from any thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._spans: list[Span] = []
        self._metrics: list[Metric] = []
        self._lock = threading.Lock()

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def metrics(self) -> list[Metric]:
        with self._lock:
            return list(self._metrics)

    def wait_for_spans(self, predicate: Callable[[Span], bool], count: int = 1, timeout: float = 30.0) -> list[Span]:
        """The spans matching `predicate`, once at least `count` arrived (bounded: raises after `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [span for span in self.spans() if predicate(span)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(found)} of {count} matching spans arrived within {timeout:.0f} s "
                                     f"({len(self.spans())} spans in all)")
            time.sleep(0.1)

    def wait_for_metric(self, name: str, timeout: float = 30.0,
                        where: Callable[[Metric], bool] | None = None) -> list[Metric]:
        """Every export of the metric `name` (that `where` accepts), once one arrived (bounded). A message reaches
        this list a moment after its sender's request returned: wait for it rather than read the list at once."""
        deadline = time.monotonic() + timeout
        while True:
            found = [metric for metric in self.metrics() if metric.name == name and (where is None or where(metric))]
            if found:
                return found
            if time.monotonic() > deadline:
                names = sorted({metric.name for metric in self.metrics()})
                raise AssertionError(f"no metric {name!r} within {timeout:.0f} s (received: {names})")
            time.sleep(0.1)

    async def _keep(self, stream: Any, into: list[Any]) -> None:
        async for message in stream:
            with self._lock:
                into.append(message)


@contextmanager
def otlp_receiver(start_timeout: float = 20.0) -> Iterator[OtlpReceiver]:
    """An oteltap receiver on a free loopback port for the block's length; stopped (thread joined) after it."""
    ready = threading.Event()
    failed: list[BaseException] = []
    holder: dict[str, Any] = {}
    loop = asyncio.new_event_loop()

    async def serve() -> None:
        for _attempt in range(5):  # a port picked free may be taken before the receiver binds it
            port = free_port()
            receiver = OtelTapHttpProtobufReceiver(OtelTapHttpProtobufReceiverSettings(http_port=port))
            try:
                await receiver.start()
            except OtelTapInitializationError as exc:
                failed[:] = [exc]
                continue
            failed.clear()
            kept = OtlpReceiver(port)
            holder["receiver"], holder["kept"] = receiver, kept
            holder["stop"] = asyncio.Event()
            tasks = [asyncio.create_task(kept._keep(receiver.stream_traces(), kept._spans)),
                     asyncio.create_task(kept._keep(receiver.stream_metrics(), kept._metrics))]
            await asyncio.sleep(0)  # both subscribed before anyone is told the receiver is up
            ready.set()
            await holder["stop"].wait()
            await receiver.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return
        ready.set()

    def main() -> None:
        try:
            loop.run_until_complete(serve())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failed[:] = [exc]
            ready.set()
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="oteltap", daemon=True)
    thread.start()
    if not ready.wait(start_timeout) or "kept" not in holder:
        raise RuntimeError(f"the OTLP receiver did not start: {failed[0] if failed else 'timed out'}")
    try:
        yield holder["kept"]
    finally:
        loop.call_soon_threadsafe(holder["stop"].set)
        thread.join(10)
