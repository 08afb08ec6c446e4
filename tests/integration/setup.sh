#!/bin/sh
# The README tour's test runs the tour's commands with bash: it needs curl (Debian's, installed when missing
# and we can; without it the test skips, and fails under CI=true), and sha256sum and cmp, which every Debian
# system has. The HTTPS doc's test (test_https_doc_try.py) needs openssl's command too, installed the same way.
# Idempotent; safe to run every time.
set -eu

missing=""
for tool in curl openssl; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        # shellcheck disable=SC2086  # one package per word
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
    else
        echo "setup.sh:$missing missing (apt-get install$missing); the README tour's and the HTTPS doc's tests will skip" >&2
    fi
fi
