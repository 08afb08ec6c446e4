#!/bin/sh
# Prerequisites of `make bench-hits`: Debian's varnish, nginx (light) and wrk, installed only when
# missing. Idempotent; the Debian services are left stopped (the bench starts its own instances).
set -eu
missing=""
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
[ -x /usr/sbin/varnishd ] || command -v varnishd >/dev/null 2>&1 || missing="$missing varnish"
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing="$missing nginx-light"
[ -n "$missing" ] || exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_hits.sh: missing:$missing (install them with apt-get as root)" >&2
    exit 1
fi
apt-get update -qq
# policy-rc.d 101: the packages' own services are not started on install.
policy=/usr/sbin/policy-rc.d
created=""
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created=1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
[ -z "$created" ] || rm -f "$policy"
