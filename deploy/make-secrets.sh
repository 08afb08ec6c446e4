#!/bin/sh
# Keys for deploy/compose.yaml, made once into deploy/secrets/ (kept out of git):
#   control.env   every key (control generates nothing then, so a new control container keeps them)
#   edge.env      what an edge needs: the cluster secret, the signed-URL secret and the metrics key
#   metrics_key   the metrics key alone, for Prometheus (mode 0644 inside a 0700 directory: the
#                 Prometheus user in its container must read it)
# An existing file is kept: run with --force to make new keys (every edge and client must get them too).
set -eu
cd "$(dirname "$0")"
dir=secrets
if [ -e "$dir/control.env" ] && [ "${1:-}" != "--force" ]; then
    echo "$dir/control.env exists; keeping it (--force makes new keys)" >&2
    exit 0
fi
umask 077
mkdir -p "$dir"
chmod 0700 "$dir"
key() { od -An -tx1 -N24 /dev/urandom | tr -d ' \n'; }
cluster=$(key) signed=$(key) metrics=$(key)
{
    echo "ASSETCDN_ACCESS_KEY=$(key)"
    echo "ASSETCDN_ACCOUNT_KEY=$(key)"
    echo "ASSETCDN_PURGE_KEY=$(key)"
    echo "ASSETCDN_ANALYTICS_KEY=$(key)"
    echo "ASSETCDN_SESSION_SECRET=$(key)"
    echo "ASSETCDN_WEBHOOK_SECRET_KEY=$(key)"
    echo "ASSETCDN_DASHBOARD_SECRET=$(key)"
    echo "ASSETCDN_CLUSTER_SECRET=$cluster"
    echo "ASSETCDN_SIGNED_URL_SECRET=$signed"
    echo "ASSETCDN_METRICS_KEY=$metrics"
} > "$dir/control.env"
{
    echo "ASSETCDN_CLUSTER_SECRET=$cluster"
    echo "ASSETCDN_SIGNED_URL_SECRET=$signed"
    echo "ASSETCDN_METRICS_KEY=$metrics"
} > "$dir/edge.env"
printf '%s' "$metrics" > "$dir/metrics_key"
chmod 0644 "$dir/metrics_key"
echo "wrote $(pwd)/$dir: control.env, edge.env, metrics_key (the API keys are in control.env)"
