"""`make docker-test`: build the image, start deploy/compose.yaml (control, two edges, Redis, Prometheus),
upload a file through one edge and read it back from the other.

Not part of `make test`: it needs a Docker engine and a few minutes. When none answers and this runs as root
with Debian's docker.io installed, it starts a private `dockerd` for the run and stops it afterwards. Without
BASE_IMAGE (any Debian bookworm image) it makes one with `debootstrap --variant=minbase bookworm`, since a
public base image may not be pullable. EXTRA_CA (default: the machine's CA bundle) is handed to the image build
as the BuildKit secret `extra_ca` for its downloads. Published ports are bound to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKER = shutil.which("docker", path="/usr/bin") or shutil.which("docker") or "docker"
BASE_TAG = "assetcdn-test/bookworm-base:latest"
IMAGES = {"ASSETCDN_IMAGE": "assetcdn-test/assetcdn:latest", "REDIS_IMAGE": "assetcdn-test/redis:latest",
          "PROMETHEUS_IMAGE": "assetcdn-test/prometheus:latest"}
ENGINE_DATA_ROOT = Path(os.environ.get("DOCKER_TEST_DATA_ROOT", "/var/tmp/assetcdn-docker-test"))
START_TIMEOUT_S = 300.0
SCRAPE_TIMEOUT_S = 90.0


def say(text: str) -> None:
    sys.stdout.write(f"docker-test: {text}\n")
    sys.stdout.flush()


def run(command: list[str], *, env: dict[str, str] | None = None, check: bool = True, quiet: bool = False,
        input_bytes: bytes | None = None, timeout: float = 1800) -> subprocess.CompletedProcess[bytes]:
    if not quiet:
        say("$ " + " ".join(command))
    result = subprocess.run(command, env=env, input=input_bytes, capture_output=quiet, timeout=timeout,
                            check=False)
    if check and result.returncode != 0:
        detail = (result.stderr or b"").decode(errors="replace")[-3000:] if quiet else ""
        raise SystemExit(f"docker-test: failed ({result.returncode}): {' '.join(command)}\n{detail}")
    return result


def engine_answers(env: dict[str, str]) -> bool:
    return run([DOCKER, "info"], env=env, check=False, quiet=True, timeout=30).returncode == 0


def start_engine(work: Path, env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    """The engine to use: the caller's (DOCKER_HOST or the default socket), else a private dockerd."""
    if engine_answers(env):
        return None
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        raise SystemExit("docker-test: no Docker engine answers, and a private one needs root and dockerd "
                         "(Debian: apt-get install docker.io docker-compose debootstrap)")
    socket_path = work / "docker.sock"
    ENGINE_DATA_ROOT.mkdir(parents=True, exist_ok=True)  # kept between runs: the build cache
    log = open(work / "dockerd.log", "wb")  # noqa: SIM115 (closed with the process)
    process = subprocess.Popen([dockerd, "--host", f"unix://{socket_path}", "--data-root", str(ENGINE_DATA_ROOT),
                                "--exec-root", str(work / "exec"), "--pidfile", str(work / "dockerd.pid")],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env["DOCKER_HOST"] = f"unix://{socket_path}"
    deadline = time.monotonic() + 60
    while not engine_answers(env):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_engine(process)
            raise SystemExit("docker-test: dockerd did not start:\n"
                             + (work / "dockerd.log").read_text(errors="replace")[-3000:])
        time.sleep(0.5)
    say(f"started a private dockerd (pid {process.pid}, data in {ENGINE_DATA_ROOT})")
    return process


def stop_engine(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def base_image(work: Path, env: dict[str, str]) -> str:
    if os.environ.get("BASE_IMAGE"):
        return os.environ["BASE_IMAGE"]
    if run([DOCKER, "image", "inspect", BASE_TAG], env=env, check=False, quiet=True).returncode == 0:
        return BASE_TAG
    debootstrap = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
    if not Path(debootstrap).exists():
        raise SystemExit("docker-test: set BASE_IMAGE, or install debootstrap to make a Debian base image")
    rootfs = work / "rootfs"
    run([debootstrap, "--variant=minbase", "bookworm", str(rootfs), "http://deb.debian.org/debian"])
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    run([DOCKER, "import", "-", BASE_TAG], env=env, input_bytes=tar.stdout.read() if tar.stdout else b"")
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)
    return BASE_TAG


def build_images(base: str, env: dict[str, str]) -> None:
    build_env = {**env, "DOCKER_BUILDKIT": "1"}
    extra_ca = os.environ.get("EXTRA_CA") or "/etc/ssl/certs/ca-certificates.crt"
    secret = ["--secret", f"id=extra_ca,src={extra_ca}"] if Path(extra_ca).is_file() else []
    run([DOCKER, "build", "--build-arg", f"BASE_IMAGE={base}", *secret, "-t", IMAGES["ASSETCDN_IMAGE"],
         str(ROOT)], env=build_env)
    for name, dockerfile in (("REDIS_IMAGE", "redis.Dockerfile"), ("PROMETHEUS_IMAGE", "prometheus.Dockerfile")):
        run([DOCKER, "build", "--build-arg", f"BASE_IMAGE={base}", "-f", str(DEPLOY / dockerfile),
             "-t", IMAGES[name], str(DEPLOY)], env=build_env)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def http(method: str, url: str, *, headers: dict[str, str] | None = None, body: bytes | None = None,
         timeout: float = 30) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 (loopback)
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for(what: str, probe: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = probe()  # type: ignore[operator]
            if last is True:
                return
        except OSError as exc:
            last = exc
        time.sleep(1)
    raise SystemExit(f"docker-test: {what} not reached within {timeout_s:.0f}s (last: {last})")


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def check_stack(compose: list[str], env: dict[str, str], secrets: dict[str, str], ports: dict[str, int]) -> None:
    edge1, edge2 = f"http://127.0.0.1:{ports['EDGE1_PORT']}", f"http://127.0.0.1:{ports['EDGE2_PORT']}"

    def healthy(url: str) -> object:
        status, body = http("GET", f"{url}/api/health", timeout=5)
        return True if status == 200 else f"{status} {body[:200]!r}"

    wait_for("edge1 healthy", lambda: healthy(edge1), START_TIMEOUT_S)
    wait_for("edge2 healthy", lambda: healthy(edge2), START_TIMEOUT_S)
    say("both edges answer /api/health with 200")
    for url in (edge1, edge2):
        status, body = http("GET", f"{url}/api/health", timeout=5)
        counters = [c for c in json.loads(body)["checks"] if c["name"] == "counters"]
        assert status == 200 and counters and counters[0]["backend"] == "redis" and counters[0]["healthy"], \
            (url, status, counters)
    say("both edges count limits in Redis (health check `counters`: backend redis, healthy)")

    account = {"AccountKey": secrets["ASSETCDN_ACCOUNT_KEY"], "Content-Type": "application/json"}
    status, body = http("POST", f"{edge1}/api/core/zones", headers=account, body=b'{"Name": "dockertest"}')
    assert status == 201, (status, body)
    payload = os.urandom(4096)
    status, body = http("PUT", f"{edge1}/api/storage/dockertest/v1/logos/payload.bin",
                        headers={"AccessKey": secrets["ASSETCDN_ACCESS_KEY"]}, body=payload)
    assert status == 201, (status, body)
    status, body = http("GET", f"{edge2}/dockertest/v1/logos/payload.bin")
    assert status == 200 and body == payload, (status, body[:200])
    say("uploaded 4096 bytes through edge1 and read the same bytes back from edge2")

    # Control publishes only the dashboard's port, not its API; every assetcdn process runs as the image's
    # non-root user.
    published = run([*compose, "port", "control", "8790"], env=env, check=False, quiet=True)
    assert not published.stdout.strip(), published.stdout
    for service in ("control", "edge1", "edge2"):
        uid = run([*compose, "exec", "-T", service, "id", "-u"], env=env, quiet=True).stdout.strip()
        assert uid not in (b"", b"0"), (service, uid)
    say("control is not published; control and edges run as a non-root user")
    status, body = http("GET", f"http://127.0.0.1:{ports['DASHBOARD_PORT']}/dashboard/login")
    assert status == 200 and b"<form" in body, (status, body[:200])
    say("the dashboard answers on its own published port")

    prometheus = f"http://127.0.0.1:{ports['PROMETHEUS_PORT']}"

    def scraped() -> object:
        status, body = http("GET", f"{prometheus}/api/v1/targets", timeout=5)
        if status != 200:
            return f"{status}"
        targets = json.loads(body)["data"]["activeTargets"]
        health = sorted((t["labels"]["instance"], t["health"]) for t in targets)
        return True if len(health) == 3 and all(h == "up" for _, h in health) else health

    wait_for("Prometheus scraping control and both edges", scraped, SCRAPE_TIMEOUT_S)
    say("Prometheus scrapes control, edge1 and edge2 (all up)")


def show_state(compose: list[str], env: dict[str, str]) -> None:
    """What a failed run needs to be understood: each container's state, its last health probes and logs."""
    run([*compose, "ps"], env=env, check=False)
    ids = run([*compose, "ps", "--quiet"], env=env, check=False, quiet=True).stdout.decode().split()
    for container in ids:
        inspected = run([DOCKER, "inspect", "--format", "{{.Name}} {{json .State.Health}}", container], env=env,
                        check=False, quiet=True)
        say("health " + inspected.stdout.decode(errors="replace").strip()[-3000:])
    run([*compose, "logs", "--tail", "60"], env=env, check=False)


def main() -> int:
    env = dict(os.environ)
    compose_tool = [DOCKER, "compose"] if run([DOCKER, "compose", "version"], env=env, check=False,
                                               quiet=True).returncode == 0 else ["docker-compose"]
    with tempfile.TemporaryDirectory(prefix="assetcdn-docker-") as tmp:
        work = Path(tmp)
        engine = start_engine(work, env)
        project = f"assetcdn-test-{os.getpid()}"
        compose: list[str] = []
        try:
            build_images(base_image(work, env), env)
            deploy = work / "deploy"
            shutil.copytree(DEPLOY, deploy, ignore=shutil.ignore_patterns("secrets"))
            run(["sh", str(deploy / "make-secrets.sh")])
            port_list = free_ports(4)
            ports = {"EDGE1_PORT": port_list[0], "EDGE2_PORT": port_list[1], "PROMETHEUS_PORT": port_list[2],
                     "DASHBOARD_PORT": port_list[3]}
            env.update({k: str(v) for k, v in ports.items()}, PUBLISH_ADDR="127.0.0.1", **IMAGES)
            compose = [*compose_tool, "--project-name", project, "--file", str(deploy / "compose.yaml")]
            try:
                # `up` fails on its own when a container never turns healthy: show why in either case.
                run([*compose, "up", "--detach", "--no-build"], env=env)
                check_stack(compose, env, read_env(deploy / "secrets" / "control.env"), ports)
            except (AssertionError, SystemExit):
                show_state(compose, env)
                raise
            say("passed")
            return 0
        finally:
            if compose:
                run([*compose, "down", "--volumes", "--timeout", "30"], env=env, check=False)
            stop_engine(engine)


if __name__ == "__main__":
    sys.exit(main())
