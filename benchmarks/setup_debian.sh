#!/bin/sh
# Debian packages a comparison benchmark needs, installed only when missing:
#   setup_debian.sh hits    (make bench-hits):  varnish, nginx (light) and wrk
#   setup_debian.sh https   (make bench-https): those of hits, plus hitch (TLS in front of Varnish),
#                                               nghttp2-client (h2load) and openssl (s_time)
#   setup_debian.sh conformance (make conformance): varnish, nginx (light), node and npm
# Idempotent; the Debian services are left stopped (the benchmarks start their own instances).
set -eu
case "${1:-}" in
    hits|https|conformance) ;;
    *) echo "usage: setup_debian.sh hits|https|conformance" >&2; exit 2 ;;
esac
missing=""
# need PACKAGE COMMAND: PACKAGE is missing unless COMMAND is on the PATH or in /usr/sbin.
need() {
    command -v "$2" >/dev/null 2>&1 || [ -x "/usr/sbin/$2" ] || missing="$missing $1"
}
[ "$1" = conformance ] || need wrk wrk
need varnish varnishd
need nginx-light nginx
if [ "$1" = conformance ]; then
    need nodejs node
    need npm npm
fi
if [ "$1" = https ]; then
    need hitch hitch
    need nghttp2-client h2load
    need openssl openssl
fi
[ -n "$missing" ] || exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_debian.sh: missing:$missing (install them with apt-get as root)" >&2
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
