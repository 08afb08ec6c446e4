"""`python -m assetcdn.control`: run the control plane (the process `assetcdn control` starts)."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from pathlib import Path

from assetcdn.shared.config import SettingsError, load_settings
from assetcdn.shared.logs import configure_logging
from assetcdn.shared.secrets import load_or_create_secrets, private_umask

EXIT_REPOSITORY_IN_USE = 5  # another control plane writes this repository: restarting cannot help


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="assetcdn control", description="Run the control plane (origin).")
    parser.add_argument("--config")
    parser.add_argument("--data-dir")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--dashboard-port", type=int, help="the dashboard's own port (server.dashboard_port)")
    parser.add_argument("--demo", action="store_true", help="install demo content into an empty repository")
    args = parser.parse_args(argv)
    # No collections until serving starts (assetcdn/shared/process.py freezes what was made by then): the
    # imports below make some 110,000 objects that live as long as the process, and the collections they
    # set off would find next to nothing to free.
    gc.disable()
    from assetcdn.control.app import create_app
    from assetcdn.control.storage.git_store import RepositoryInUse
    from assetcdn.shared.http_server import serve

    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        parser.error(str(exc))
    if args.dashboard_port:
        settings = settings.with_overrides("server", dashboard_port=args.dashboard_port)
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    host = args.host or settings.get("server", "host")
    port = args.port or settings.get("server", "control_port")
    dashboard_port = settings.get("server", "dashboard_port")
    if dashboard_port == port:
        parser.error(f"the dashboard port ({dashboard_port}) must differ from control's port")
    from assetcdn.control.records.client_ip import trusted_proxies
    from assetcdn.shared.pull_settings import check_allow_loopback
    try:
        check_allow_loopback(settings)  # control checks zones' origin addresses with it
        check_allow_loopback(settings, "webhooks")  # and webhook targets
        trusted_proxies(settings.get("control", "trusted_proxies"))  # a bad entry stops start-up: named here
    except ValueError as exc:
        parser.error(str(exc))
    configure_logging("control")
    private_umask()  # the repository, database and work files are the owner's only
    try:
        secrets, generated = load_or_create_secrets(data_dir)
    except OSError as exc:  # under a file, or a place this user may not write: said, not a traceback
        parser.error(f"the data directory {data_dir} cannot be used ({exc.strerror or exc}): choose another with "
                     "--data-dir or ASSETCDN_SERVER_DATA_DIR ([server] data_dir)")
    if generated:
        logging.getLogger("control").info("generated %d missing secrets into %s", len(generated),
                                           data_dir / "secrets.env")
    app = create_app(settings, secrets, data_dir, demo=args.demo)
    try:
        status = serve(app, settings, host=host, port=port, more_ports=(dashboard_port,))
    except RepositoryInUse as exc:
        logging.getLogger("control").error("cannot start: %s", exc)
        status = EXIT_REPOSITORY_IN_USE
    sys.exit(status)


if __name__ == "__main__":
    main()
