"""The harness's Prometheus metrics: what is measured (`registry`) and how it is served (`exporter`).

`docs/metrics.md` lists every name, label and bucket (generated from `RunMetrics`).
"""
