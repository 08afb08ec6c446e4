"""What counts as a delivery: the one definition the edge and control both use.

A *delivery* is an answer of the edge's own public routes (files, transforms, streams, redirects and
errors alike): not an API call the edge forwards to control, not its health or metrics, not the
cluster protocol, not an ACME HTTP-01 challenge's answer (the edge's to a CA, on every host, as it is). Deliveries get the `_headers` rules and go into the delivery log.

An *asset delivery* is a delivery that handed over (or confirmed, 304) a file under a CDN path: the
top-asset lists count only these, not `/api/...` answers, errors or redirects.
"""

from __future__ import annotations

from assetcdn.shared.cluster import PREFIX as CLUSTER_PREFIX

# Paths the edge answers on every host that are not deliveries.
NOT_DELIVERY_PATHS = frozenset({"/api/health", "/metrics"})
# ... and every path under these: the cluster protocol, and ACME HTTP-01 challenges (assetcdn/edge/tls/policy.py),
# whose `Cache-Control: no-store` no `_headers` rule may change.
ACME_CHALLENGE_PREFIX = "/.well-known/acme-challenge/"
NOT_DELIVERY_PREFIXES = (CLUSTER_PREFIX, ACME_CHALLENGE_PREFIX)
# A logged path (without its leading slash) of this form is an API answer, not a file.
API_PATH_PREFIX = "api/"


def is_delivery(path: str, *, forwarded: bool) -> bool:
    """True for a request the edge answers as a delivery: ``path`` as requested, ``forwarded`` when the
    edge hands it to control."""
    return not forwarded and path not in NOT_DELIVERY_PATHS and not path.startswith(NOT_DELIVERY_PREFIXES)


def is_asset_delivery(status: int, logged_path: str) -> bool:
    """True for a delivery's log entry (``logged_path`` without its leading slash) that delivered a file."""
    return (200 <= status < 300 or status == 304) and bool(logged_path) \
        and not logged_path.startswith(API_PATH_PREFIX)
