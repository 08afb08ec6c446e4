"""The `assetcdn` command: `up` (control plus N edges, assetcdn/supervisor.py), `control`, `edge`, `sign`,
`defaults`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from assetcdn.shared.config import SettingsError, default_config_text, load_settings
from assetcdn.shared.host_url import host_url
from assetcdn.shared.paths import InvalidPath
from assetcdn.shared.secrets import signed_url_secret
from assetcdn.shared.signing import signable_path, signed_url
from assetcdn.supervisor import cmd_up, say


def cmd_sign(args: argparse.Namespace) -> int:
    try:  # a URL the edge would refuse whatever its signature is never printed
        path = signable_path(args.path)
    except InvalidPath as exc:
        say(f"assetcdn sign: the edge refuses the path {args.path!r} (403 Invalid path format): {exc}", error=True)
        return 2
    settings = load_settings(args.config)
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    secret = signed_url_secret(data_dir)
    if not secret:
        say("no signed-URL secret: set ASSETCDN_SIGNED_URL_SECRET or pass --data-dir", error=True)
        return 2
    base = args.base_url or settings.get("server", "public_url") or \
        host_url(settings.get('server', 'host'), settings.get('server', 'edge_port'))
    say(signed_url(base, secret, path, args.ttl))
    return 0


def whole_number(text: str, least: int, why: str = "") -> int:
    """An argparse value: a whole number of at least `least` (`why`: what a smaller one would do)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, not {value}{why}")
    return value


def positive_seconds(text: str) -> int:
    """`--ttl`: a URL valid for at least a second (0 or less would print one expired as it is made)."""
    return whole_number(text, 1, " seconds: the URL would have expired as it is made")


def cmd_defaults(args: argparse.Namespace) -> int:
    """The embedded defaults, to copy into a --config file and edit (a wheel install has no conf/ to look at)."""
    sys.stdout.write(default_config_text())
    return 0


def at_least_one(text: str) -> int:
    """A count of processes: `--edges 0` started control alone and then failed where it named its first edge."""
    return whole_number(text, 1)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("control", "edge"):
        # One process each, for separate hosts: hand over to the process's own entry point.
        os.execv(sys.executable, [sys.executable, "-m", f"assetcdn.{argv[0]}", *argv[1:]])
    parser = argparse.ArgumentParser(prog="assetcdn", description="Self-hostable asset CDN.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start control plus N edge nodes")
    up.add_argument("--data-dir")
    up.add_argument("--host")
    up.add_argument("--edge-port", type=int)
    up.add_argument("--control-port", type=int)
    up.add_argument("--dashboard-port", type=int, help="the dashboard's own port (default 8787)")
    up.add_argument("--https-port", type=int, help="https on edge i at this port + i (default: [tls] https_port)")
    up.add_argument("--edges", type=at_least_one, default=1)
    up.add_argument("--workers", type=at_least_one, default=1)
    up.add_argument("--no-demo", action="store_true")
    up.add_argument("--config")
    up.add_argument("--check-ports", action="store_true",
                    help="only say whether every port is free (exit 1 if not); needs none of the dependencies")
    up.set_defaults(func=cmd_up)
    sub.add_parser("control", help="run the control plane (see `assetcdn control --help`)")
    sub.add_parser("edge", help="run one edge node (see `assetcdn edge --help`)")
    sign = sub.add_parser("sign", help="print a signed URL for a protected asset")
    sign.add_argument("path")
    sign.add_argument("--ttl", type=positive_seconds, default=3600, help="seconds the URL is valid (default 3600)")
    sign.add_argument("--base-url")
    sign.add_argument("--data-dir")
    sign.add_argument("--config")
    sign.set_defaults(func=cmd_sign)
    defaults = sub.add_parser("defaults", help="print the embedded default configuration (TOML)")
    defaults.set_defaults(func=cmd_defaults)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SettingsError as exc:  # a config file or variable that cannot be read: said, not a traceback
        say(f"assetcdn {args.command}: {exc}", error=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
