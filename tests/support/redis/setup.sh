#!/bin/sh
# Shared-counter test prerequisite: Debian's redis-server (the Redis backend, assetcdn/shared/counter_backends/redis.py),
# when missing and we can install it. Idempotent; safe to run every time. Without it the Redis tests
# skip and say why (under CI=true they fail instead). Only the binary is used: the tests start their
# own server on a free loopback port, so the packaged service is not needed.
set -eu
if ! command -v redis-server >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server
    else
        echo "setup.sh: redis-server is missing (apt-get install redis-server); the Redis counter tests will skip" >&2
    fi
fi
