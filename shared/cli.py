"""The `assetcdn` command: `up` (control plus N edges), `control`, `edge`, `sign`.

`up` starts each process as a child (`python -m control`, `python -m edge`); it never imports them,
so the edge and control stay separable onto other hosts.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from shared.config import load_settings
from shared.process import die_with_parent
from shared.secrets import SECRETS_FILE, load_or_create_secrets, private_umask, signed_url_secret
from shared.signing import signed_url

HEALTH_TIMEOUT_S = 60.0
MAX_RESTARTS = 5
CRASH_WINDOW_S = 60.0
# The keys a user passes to the API (named in `up`'s output); the internal secrets are never mentioned.
USER_KEYS = ("ASSETCDN_ACCESS_KEY", "ASSETCDN_ACCOUNT_KEY", "ASSETCDN_PURGE_KEY", "ASSETCDN_ANALYTICS_KEY",
             "ASSETCDN_METRICS_KEY", "ASSETCDN_DASHBOARD_SECRET")


def _say(text: str, *, error: bool = False) -> None:
    stream = sys.stderr if error else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/api/health", timeout=2) as resp:  # noqa: S310 (loopback/operator URL)
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_healthy(urls: list[str], processes: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(urls)
    while pending:
        for process in processes:
            if process.poll() is not None:
                raise SystemExit(f"a child process exited early with status {process.returncode}")
        pending = [u for u in pending if not _healthy(u)]
        if pending and time.monotonic() > deadline:
            raise SystemExit(f"not healthy after {timeout_s:.0f}s: {', '.join(pending)}")
        if pending:
            time.sleep(0.2)


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], env=env, preexec_fn=die_with_parent)  # noqa: PLW1509


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):  # edges first, control last
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + 10
    for process in reversed(processes):
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _keys_notice(secrets_path: Path, generated: list[str]) -> str:
    """Where the keys are, by name only: output of `up` ends up in logs, so no key value is ever printed."""
    if not generated:
        return f"Keys: from the environment or {secrets_path}"
    user_keys = [name for name in generated if name in USER_KEYS]
    named = f" ({', '.join(user_keys)})" if user_keys else ""
    return (f"Generated keys{named} are in {secrets_path} (mode 0600); they are not printed. "
            f"Load them with: set -a; . {secrets_path}; set +a")


def cmd_up(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    host = args.host or settings.get("server", "host")
    edge_port = args.edge_port or settings.get("server", "edge_port")
    control_port = args.control_port or settings.get("server", "control_port")
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    private_umask()  # everything control and the edges create under the data dir is the owner's only
    first_start = not (data_dir / "repo.git").exists()
    secrets, generated = load_or_create_secrets(data_dir)
    env = {**os.environ, **secrets.as_env(), "ASSETCDN_SERVER_EDGE_PORT": str(edge_port),
           "ASSETCDN_SERVER_HOST": host}
    if args.config:
        env["ASSETCDN_CONFIG"] = str(Path(args.config).resolve())
    control_url = f"http://{host}:{control_port}"
    demo = ["--demo"] if first_start and not args.no_demo else []
    commands = [["-m", "control", "--data-dir", str(data_dir), "--host", host, "--port", str(control_port), *demo]]
    edge_urls = []
    for i in range(args.edges):
        port = edge_port + i
        commands.append(["-m", "edge", "--control-url", control_url, "--name", f"edge-{i}", "--host", host,
                         "--port", str(port), "--workers", str(args.workers), "--data-dir", str(data_dir)])
        edge_urls.append(f"http://{host}:{port}")
    processes: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        processes.append(_spawn(commands[0], env))
        _wait_healthy([control_url], processes, HEALTH_TIMEOUT_S)
        commands[0] = [a for a in commands[0] if a != "--demo"]  # a restarted control must not re-seed
        processes.extend(_spawn(command, env) for command in commands[1:])
        _wait_healthy(edge_urls, processes, HEALTH_TIMEOUT_S)
        _say(f"assetcdn is up: {edge_urls[0]}  (control {control_url}; edges {', '.join(edge_urls)})")
        _say(_keys_notice(data_dir / SECRETS_FILE, generated))
        return _supervise(processes, commands, env)
    except KeyboardInterrupt:
        return 0
    finally:
        _stop_all(processes)


def _supervise(processes: list[subprocess.Popen[bytes]], commands: list[list[str]], env: dict[str, str]) -> int:
    """Restart a child that dies (an edge that crashed catches up on what it missed); give up on a crash loop."""
    restarts: list[float] = []
    while True:
        for index, process in enumerate(processes):
            if process.poll() is None:
                continue
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < CRASH_WINDOW_S] + [now]
            if len(restarts) > MAX_RESTARTS:
                _say(f"children keep exiting ({len(restarts)} restarts in {CRASH_WINDOW_S:.0f}s); stopping", error=True)
                return 1
            _say(f"{' '.join(commands[index][1:3])} exited with status {process.returncode}; restarting", error=True)
            processes[index] = _spawn(commands[index], env)
        time.sleep(0.5)


def cmd_sign(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    data_dir = Path(args.data_dir or settings.get("server", "data_dir")).resolve()
    secret = signed_url_secret(data_dir)
    if not secret:
        _say("no signed-URL secret: set ASSETCDN_SIGNED_URL_SECRET or pass --data-dir", error=True)
        return 2
    base = args.base_url or settings.get("server", "public_url") or \
        f"http://{settings.get('server', 'host')}:{settings.get('server', 'edge_port')}"
    _say(signed_url(base, secret, args.path, args.ttl))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("control", "edge"):
        # One process each, for separate hosts: hand over to the process's own entry point.
        os.execv(sys.executable, [sys.executable, "-m", argv[0], *argv[1:]])
    parser = argparse.ArgumentParser(prog="assetcdn", description="Self-hostable asset CDN.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start control plus N edge nodes")
    up.add_argument("--data-dir")
    up.add_argument("--host")
    up.add_argument("--edge-port", type=int)
    up.add_argument("--control-port", type=int)
    up.add_argument("--edges", type=int, default=1)
    up.add_argument("--workers", type=int, default=1)
    up.add_argument("--no-demo", action="store_true")
    up.add_argument("--config")
    up.set_defaults(func=cmd_up)
    sub.add_parser("control", help="run the control plane (see `assetcdn control --help`)")
    sub.add_parser("edge", help="run one edge node (see `assetcdn edge --help`)")
    sign = sub.add_parser("sign", help="print a signed URL for a protected asset")
    sign.add_argument("path")
    sign.add_argument("--ttl", type=int, default=3600)
    sign.add_argument("--base-url")
    sign.add_argument("--data-dir")
    sign.add_argument("--config")
    sign.set_defaults(func=cmd_sign)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
