"""Prometheus: metric families from the figures (exposition), the HTTP endpoint (serve) and the
textfiles. The only importer of prometheus_client."""
