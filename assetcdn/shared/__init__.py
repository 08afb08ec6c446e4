"""Code both the edge and the control plane import: config, envelopes, manifest model, cluster messages."""

API_VERSION = "2026-04-01"
