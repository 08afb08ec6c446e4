"""Test helpers live in tests/support/: every name the rewrite script maps is there, the script rewrites
what a test may have written against the old homes, and no test imports from a conftest.py or a test module."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from tests.support.rewrite_imports import MOVED, rewrite

TESTS = Path(__file__).parent


def test_every_moved_name_is_in_its_new_module() -> None:
    missing = [old for old, new in MOVED.items() if not hasattr(importlib.import_module(new), old.rsplit(".", 1)[1])]
    assert missing == []


def test_moved_names_are_imported_from_their_new_modules_and_the_rest_stay() -> None:
    source = ("from tests.edge.routes.conftest import (\n    ZONE,\n    CdnFactory,  # the factory\n    wait_until,\n)\n"
              "from tests.edge.routes.conftest import make_cdn\n"
              "def late():\n    from .conftest import upload as put, MakeControl\n")
    assert rewrite(source, "tests.control.search") == (
        "from tests.support.cdn import ZONE, CdnFactory\nfrom tests.support.wait import wait_until\n"
        "from tests.edge.routes.conftest import make_cdn\n"
        "def late():\n    from tests.support.search import upload as put\n"
        "    from tests.support.control import MakeControl\n")


def parsed(source: str) -> ast.Module:
    """`ast.parse`, once more after CPython 3.11's `SystemError: AST constructor recursion depth mismatch`
    (python/cpython#106905): the depth its AST check counts is shared with other threads' compiling (a thread an
    earlier test of this worker left running), so a parse can fail for another thread's work, not its source."""
    try:
        return ast.parse(source)
    except SystemError:
        return ast.parse(source)


def test_no_test_imports_from_a_conftest_or_a_test_module() -> None:
    found = []
    for path in TESTS.rglob("*.py"):
        if ".npm" in path.parts:
            continue
        for node in ast.walk(parsed(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and (node.level or node.module.startswith("tests.")):
                last = node.module.rsplit(".", 1)[-1]
                if last == "conftest" or last.startswith("test_"):
                    found.append(f"{path.relative_to(TESTS)}:{node.lineno} {node.module}")
    assert found == []
