"""OpenTelemetry: the harness's spans and metrics over OTLP, off unless the standard variables or `--otlp` ask."""
