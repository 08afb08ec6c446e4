#!/bin/sh
# The README tour's test runs the tour's commands with bash: it needs curl (Debian's, installed when missing
# and we can; without it the test skips, and fails under CI=true), and sha256sum and cmp, which every Debian
# system has. Idempotent; safe to run every time.
set -eu

if ! command -v curl >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl
    else
        echo "setup.sh: curl is missing (apt-get install curl); the README tour's test will skip" >&2
    fi
fi
