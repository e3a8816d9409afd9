"""No test leaves without a verdict by skipping on its own, checked on the source.

Two rules, read with `ast` from every module (a skip written inside a string, e.g. a pytester
test file, is not a call and is not counted):
- The project's tests (tests/) reach a missing outside resource (a broker, a package, a shared
  directory, Java, Chromium, ...) only through `tests.conftest.require`, which skips, and fails
  under AMQPC_STRICT=1 (`.ci/run`): CI never passes by skipping. A direct `pytest.skip`,
  `pytest.importorskip`, `pytest.mark.skip`/`skipif` or unittest skip is allowed only in
  `ALLOWED`, each entry with the reason it is not about a resource.
- The shipped suite (conformance/suite) never skips directly: a test that does not run says why
  with a verdict helper of conformance/plugin/verdicts.py (`not_applicable`, `judged_elsewhere`,
  ...); a bare skip has no verdict prefix and would be `broken` (plugin/classify.py).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP_NAMES = frozenset({"skip", "skipif", "importorskip", "skipIf", "skipUnless", "SkipTest", "skipTest"})
SKIP_MODULES = frozenset({"pytest", "_pytest", "unittest"})
# (path, enclosing function) -> why this direct skip is not about an outside resource
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/conftest.py", "require"): "the strict-mode helper itself: it skips, or fails under AMQPC_STRICT=1",
}


@dataclass(frozen=True)
class Skip:
    path: str
    function: str  # the enclosing function ("<module>" at module level)
    line: int
    what: str


class _SkipFinder(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path, self.scope, self.found = path, ["<module>"], list[Skip]()

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _enter

    def _add(self, node: ast.AST, what: str) -> None:
        self.found.append(Skip(self.path, self.scope[-1], getattr(node, "lineno", 0), what))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        root: ast.expr = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if node.attr in SKIP_NAMES and (
                (isinstance(root, ast.Name) and root.id in SKIP_MODULES) or node.attr == "skipTest"):
            self._add(node, ast.unparse(node))
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if (node.module or "").split(".")[0] in SKIP_MODULES:
            for alias in node.names:
                if alias.name in SKIP_NAMES:
                    self._add(node, f"from {node.module} import {alias.name}")


def find_skips(source: str, path: str = "<string>") -> list[Skip]:
    """Every direct skip in `source`, with its enclosing function."""
    finder = _SkipFinder(path)
    finder.visit(ast.parse(source, filename=path))
    return sorted(finder.found, key=lambda s: s.line)


def skips_under(folder: str) -> list[Skip]:
    return [skip for file in sorted((ROOT / folder).rglob("*.py"))
            for skip in find_skips(file.read_text(encoding="utf-8"), file.relative_to(ROOT).as_posix())]


def test_the_finder_sees_every_form_of_skip_and_nothing_in_strings() -> None:
    source = '''
import pytest, unittest
from pytest import importorskip
def a():
    pytest.skip("no broker")
def b():
    pika = pytest.importorskip("pika")
@pytest.mark.skipif(True, reason="x")
def c():
    "pytest.skip('inside a docstring')"
    text = "pytest.skip('inside a string')"
    recorder.skip(1, "a method called skip on something else")
@unittest.skip("x")
def d(self):
    self.skipTest("x")
'''
    found = [(s.function, s.line) for s in find_skips(source)]
    assert found == [("<module>", 3), ("a", 5), ("b", 7), ("c", 8), ("d", 13), ("d", 15)]  # a decorator: its function


def test_tests_reach_missing_resources_only_through_require() -> None:
    found = skips_under("tests")
    unexpected = [s for s in found if (s.path, s.function) not in ALLOWED]
    assert unexpected == [], ("use tests.conftest.require(condition, reason) for an outside resource "
                              "(strict under AMQPC_STRICT=1), or add the skip to ALLOWED with its reason")
    stale = set(ALLOWED) - {(s.path, s.function) for s in found}
    assert stale == set(), "ALLOWED entries whose skip is gone"


def test_the_suite_skips_only_through_verdict_helpers() -> None:
    assert skips_under("conformance/suite") == [], \
        "a suite test that does not run calls a verdict helper (conformance/plugin/verdicts.py)"


@pytest.mark.parametrize("folder", ["tests", "conformance/suite"])
def test_the_checked_folders_hold_tests(folder: str) -> None:
    assert len(list((ROOT / folder).rglob("test_*.py"))) >= 10, folder  # the check reads a real tree
