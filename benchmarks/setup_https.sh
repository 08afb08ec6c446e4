#!/bin/sh
# Prerequisites of `make bench-https`: those of bench-hits (Varnish, nginx, wrk) plus Debian's hitch (TLS
# in front of Varnish) and nghttp2-client (h2load), installed only when missing. Idempotent; the Debian
# services are left stopped (the bench starts its own instances).
set -eu
sh "$(dirname "$0")/setup_hits.sh"
missing=""
command -v hitch >/dev/null 2>&1 || [ -x /usr/sbin/hitch ] || missing="$missing hitch"
command -v h2load >/dev/null 2>&1 || missing="$missing nghttp2-client"
[ -n "$missing" ] || exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_https.sh: missing:$missing (install them with apt-get as root)" >&2
    exit 1
fi
apt-get update -qq
policy=/usr/sbin/policy-rc.d
created=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created=1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
[ -z "$created" ] || rm -f "$policy"
