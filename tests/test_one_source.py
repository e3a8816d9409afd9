"""One source per protocol fact, checked on the source.

AMQP reply codes come from `codec.constants.ReplyCode`, never from a number typed again in
product code (conformance, reference_broker, reports, bench): a reply-code value written as an
integer literal there fails this test. HTTP statuses are `http.HTTPStatus` members, so they do
not collide. Exit statuses of the CLI come from `conformance.results.verdicts` (EXIT_*): a
`return N` of a literal N > 0 in a command's `main` fails (the reference broker is its own
program and imports nothing of the harness: its exit statuses are its own). Tests aside.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from codec.constants import ReplyCode

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("conformance", "reference_broker", "reports", "bench")
REPLY_CODES = {int(code) for code in ReplyCode if code != ReplyCode.REPLY_SUCCESS}  # 200 is every HTTP OK too


def _product_modules() -> list[Path]:
    return [p for package in PRODUCT for p in sorted((ROOT / package).rglob("*.py"))]


def reply_code_literals(source: str) -> list[tuple[int, int]]:
    """(line, value) of each integer literal in `source` that is an AMQP reply code."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and type(n.value) is int and n.value in REPLY_CODES]


def test_no_reply_code_literal_in_product_code() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}: {value} (use ReplyCode.{ReplyCode(value).name})"
             for path in _product_modules() for line, value in reply_code_literals(path.read_text(encoding="utf-8"))]
    assert not found, "reply codes typed as literals:\n" + "\n".join(found)


def _literal_exits(source: str) -> list[int]:
    """Lines of `return N`, `sys.exit(N)` and `SystemExit(N)` with a literal N > 0 in functions named `main`."""
    lines = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef) or fn.name != "main":
            continue
        for node in ast.walk(fn):
            value = node.value if isinstance(node, ast.Return) else (
                node.args[0] if isinstance(node, ast.Call) and node.args and (
                    (isinstance(node.func, ast.Attribute) and node.func.attr == "exit")
                    or (isinstance(node.func, ast.Name) and node.func.id in ("exit", "SystemExit"))) else None)
            if isinstance(value, ast.Constant) and type(value.value) is int and value.value > 0:
                lines.append(node.lineno)
    return lines


def test_exit_statuses_come_from_the_results_kernel() -> None:
    harness = [p for p in _product_modules() if p.relative_to(ROOT).parts[0] != "reference_broker"]
    found = [f"{path.relative_to(ROOT)}:{line}" for path in harness
             for line in _literal_exits(path.read_text(encoding="utf-8"))]
    assert not found, "exit statuses typed as literals (use conformance.results.verdicts.EXIT_*):\n" + "\n".join(found)


@pytest.mark.parametrize(("source", "expected"), [
    ("close(ch, 406, 'x')", [(1, 406)]),
    ("close(ch, ReplyCode.PRECONDITION_FAILED, 'x')", []),
    ("width = 200", []),
])
def test_the_reply_code_check_sees_literals(source: str, expected: list[tuple[int, int]]) -> None:
    assert reply_code_literals(source) == expected


def test_the_exit_check_sees_literals() -> None:
    assert _literal_exits("def main():\n    if x:\n        return 4\n    sys.exit(3)\n    return EXIT_OK\n") == [3, 4]


def _declared_flags(path: Path, within: str | None = None) -> list[str]:
    """The literal flags `add_argument`/`addoption` calls declare in `path` (in function `within` only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scope = tree if within is None else next(n for n in ast.walk(tree)
                                             if isinstance(n, ast.FunctionDef) and n.name == within)
    return [str(call.args[0].value) for call in ast.walk(scope)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr in ("add_argument", "addoption") and call.args
            and isinstance(call.args[0], ast.Constant) and str(call.args[0].value).startswith("--")]


def test_each_run_option_is_declared_once() -> None:
    """`amqp-conformance run` and the pytest plugin add the run's options from one table
    (conformance/run/options.py): the plugin declares no flag of its own, and the gate only its own."""
    from conformance.run.options import PLUGIN_OPTIONS, RUN_OPTIONS

    flags = [o.flag for o in (*RUN_OPTIONS, *PLUGIN_OPTIONS)]
    assert len(flags) == len(set(flags))
    in_plugin = [f for p in sorted((ROOT / "conformance" / "plugin").glob("*.py")) for f in _declared_flags(p)]
    assert in_plugin == []
    in_gate = _declared_flags(ROOT / "conformance" / "gate" / "cli.py", "run_arguments")
    assert in_gate and not set(in_gate) & set(flags), in_gate
