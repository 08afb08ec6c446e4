#!/bin/sh
# `make docker-test` prerequisites from Debian: the engine (docker.io: dockerd and a docker client with
# BuildKit built in), docker-compose, and debootstrap for a base image made locally. Best effort: as root
# with apt-get only, and only what is missing.
command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ] || exit 0
missing=""
command -v dockerd >/dev/null 2>&1 || missing="$missing docker.io"
command -v docker-compose >/dev/null 2>&1 || missing="$missing docker-compose"
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing="$missing debootstrap"
[ -z "$missing" ] && exit 0
echo "docker-test: installing$missing (Debian)"
apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
