"""Whether OpenTelemetry export is on, and the name a process exports under: read from OpenTelemetry's own
variables, so every process agrees.

`run --otlp URL` only sets `OTEL_EXPORTER_OTLP_ENDPOINT` (and the protocol) in the run's environment:
the load process, Locust's workers and the shop's replicas all inherit it and decide from the same
variables as any OpenTelemetry SDK would. `OTEL_EXPORTER_OTLP_HEADERS` may hold a backend's API key:
it is read by the exporter and never written anywhere by the harness.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

ENDPOINT: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
METRICS_ENDPOINT: Final = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
PROTOCOL: Final = "OTEL_EXPORTER_OTLP_PROTOCOL"
SERVICE_NAME: Final = "OTEL_SERVICE_NAME"
HEADERS: Final = "OTEL_EXPORTER_OTLP_HEADERS"
HTTP_PROTOBUF: Final = "http/protobuf"
"""The one OTLP protocol the harness exports with (the exporter package it depends on)."""


def _disabled(environ: Mapping[str, str]) -> bool:
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _exporter_none(environ: Mapping[str, str], variable: str) -> bool:
    return environ.get(variable, "").strip().lower() == "none"


def tracing_on(environ: Mapping[str, str] | None = None) -> bool:
    """Spans are exported: an OTLP endpoint is set (all signals, or traces alone), and neither
    `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise."""
    env = os.environ if environ is None else environ
    return bool(env.get(ENDPOINT) or env.get(TRACES_ENDPOINT)) and not _disabled(env) \
        and not _exporter_none(env, "OTEL_TRACES_EXPORTER")


def metrics_on(environ: Mapping[str, str] | None = None) -> bool:
    """Metrics are exported over OTLP (as well as served to Prometheus): the same rule for metrics."""
    env = os.environ if environ is None else environ
    return bool(env.get(ENDPOINT) or env.get(METRICS_ENDPOINT)) and not _disabled(env) \
        and not _exporter_none(env, "OTEL_METRICS_EXPORTER")


def turn_on(url: str, environ: MutableMapping[str, str] | None = None) -> None:
    """What `--otlp URL` does: the endpoint for every signal, over http/protobuf, for this process and its children."""
    env = os.environ if environ is None else environ
    env[ENDPOINT] = url
    env[PROTOCOL] = HTTP_PROTOBUF


def named_resource(default_name: str, attributes: Mapping[str, Any]) -> Resource:
    """A resource from OpenTelemetry's variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, as the SDK reads
    them) and `attributes`, its `service.name` `default_name` when neither variable names the service."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create(dict(attributes))
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: default_name}))
    return resource
