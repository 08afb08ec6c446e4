"""Schemathesis runs forked from one process that has imported it: each run of tests/openapi_fuzz.py is the
`schemathesis` command line, with its own process, working directory, output and exit status, but without
starting an interpreter and importing schemathesis, Hypothesis and requests again for each run.

Run as a script (`python tests/schemathesis_forks.py`), it reads one request a line on stdin, a JSON object
with `argv`, `cwd`, `stdout` and `stderr` (file paths), runs it in a forked child and answers a line
`{"returncode": N}` on stdout once the child has exited. It imports nothing from the project, so it starts
wherever the project is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

# What a run imports (the command's options alone import the rest lazily): loaded once, before any fork.
PRELOAD = ("schemathesis.cli", "schemathesis.cli.executor", "schemathesis.cli.commands.run.executor",
           "schemathesis.engine.core", "schemathesis.engine.run.unit", "schemathesis.engine.run.stateful",
           "schemathesis.generation.hypothesis.builder", "schemathesis.transport.requests",
           "schemathesis.reporting.junitxml", "schemathesis.specs.openapi.schemas", "hypothesis", "requests",
           "rich.console", "rich.live", "rich.progress", "rich.table", "pyrate_limiter", "anyio", "sqlite3")


class Schemathesis:
    """The fork server, started on entering and stopped on leaving; `run` is one command line in a child."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Schemathesis:
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.close()  # the server ends at the end of its input
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def run(self, argv: list[str], cwd: Path, output: Path) -> subprocess.CompletedProcess[str]:
        """`schemathesis *argv` in `cwd`; its output (kept in `output`.out and .err) and exit status, as
        subprocess.run would give them."""
        assert self.process is not None and self.process.stdin is not None and self.process.stdout is not None
        stdout, stderr = output.with_suffix(".out"), output.with_suffix(".err")
        request = {"argv": argv, "cwd": str(cwd), "stdout": str(stdout), "stderr": str(stderr)}
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise AssertionError(f"the schemathesis fork server exited with {self.process.wait()}")
        returncode = int(json.loads(answer)["returncode"])
        return subprocess.CompletedProcess(["schemathesis", *argv], returncode, stdout.read_text(errors="replace"),
                                           stderr.read_text(errors="replace"))


def _child(request: dict[str, Any]) -> int:
    """In the forked child: the command line, with the request's directory and output files."""
    os.chdir(request["cwd"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    from schemathesis.cli import schemathesis

    sys.argv = ["schemathesis", *request["argv"]]
    try:
        schemathesis.main(args=request["argv"], prog_name="schemathesis")
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def _serve() -> None:
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request)
            except BaseException:  # noqa: BLE001 (whatever it was, the child's stderr says so)
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
