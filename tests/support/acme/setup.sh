#!/bin/sh
# ACME test prerequisites, installed when missing and we can: Debian's pebble package (`pebble`, a test-only ACME
# server, and `pebble-challtestsrv`, its mock DNS), curl (the end-to-end test's https client) and certutil
# (libnss3-tools: the browser test trusts Pebble's root in a throw-away NSS database of its own). Idempotent;
# safe to run every time. Without them the ACME tests skip and say why (under CI=true they fail instead). The
# tests start their own servers on free loopback ports (tests/support/acme/pebble.py); no packaged service is used.
set -eu
missing=""
for tool in pebble pebble-challtestsrv curl certutil; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            pebble curl libnss3-tools
    else
        echo "setup.sh:$missing missing (apt-get install pebble curl libnss3-tools); the ACME tests will skip" >&2
    fi
fi
