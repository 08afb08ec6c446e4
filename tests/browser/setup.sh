#!/bin/sh
# Browser-test prerequisites: Debian's chromium (when missing and we can install it) and
# hls.js from the npm registry into tests/browser/.npm (Debian's npm first, when missing and we can install it).
# Idempotent; safe to run every time.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
HLS_JS_VERSION=${HLS_JS_VERSION:-1}

if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
    else
        echo "setup.sh: chromium is missing (apt-get install chromium); browser tests will skip" >&2
    fi
fi

if [ ! -f "$here/.npm/node_modules/hls.js/dist/hls.min.js" ]; then
    # npm (Debian's nodejs and npm) fetches hls.js; the cache conformance suite needs it too.
    if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
    fi
    if command -v npm >/dev/null 2>&1; then
        npm install --prefix "$here/.npm" --no-save --no-package-lock --no-audit --no-fund \
            --loglevel=error "hls.js@$HLS_JS_VERSION"
    else
        echo "setup.sh: npm is missing; browser tests will skip" >&2
    fi
fi
