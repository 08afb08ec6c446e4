"""Reading a /metrics text (Prometheus exposition) in tests."""

from __future__ import annotations


def metric(text: str, name: str, **labels: str) -> float:
    """The value of the series `name` with `labels` (among others) in a /metrics text; 0 when there is none."""
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{key}="{value}"' in line for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
