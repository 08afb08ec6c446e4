#!/bin/sh
# ACME test prerequisite: Debian's pebble package (`pebble`, a test-only ACME server, and `pebble-challtestsrv`,
# its mock DNS) and curl (the end-to-end test's https client), when missing and we can install it. Idempotent; safe to run every time. Without it the ACME
# tests skip and say why (under CI=true they fail instead). The tests start their own servers on free loopback
# ports (tests/acme/pebble.py); no packaged service is used.
set -eu
if ! command -v pebble >/dev/null 2>&1 || ! command -v pebble-challtestsrv >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pebble curl
    else
        echo "setup.sh: pebble or curl is missing (apt-get install pebble curl); the ACME tests will skip" >&2
    fi
fi
