"""The import layering of the project (docs/design.md, conventions; docs/architecture.md), checked on the source.

Every `import` statement of the packages is read with `ast` (at any depth: module level,
function level and under `if TYPE_CHECKING:`), resolved to project modules, and checked:
- codec imports nothing of the project;
- reference_broker never imports conformance or reports, and its core's concern modules
  never import the router;
- conformance.model imports only the standard library and codec.constants;
- exactly one conformance module (conformance/embedded.py) imports reference_broker;
- reports imports conformance only for the results kernel, the catalogue, the model (the
  trace audit) and the pre-flight's pure core;
- exactly one harness module, the front door `conformance.cli`, imports the reports;
- the catalogue imports nothing else of the harness (the ground floor);
- conformance.interpose (the one relay) imports only codec and the results kernel;
- reference_broker/core and conformance import project modules at module level only;
- there is no import cycle anywhere.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

# one pytest-xdist worker for them all: they share one parse of every module (`imports`, cached)
pytestmark = pytest.mark.xdist_group("layering")
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("codec", "reference_broker", "conformance", "reports", "bench")
PROJECT = (*PACKAGES, "tests")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported project module
    nested: bool  # inside a function (not module level, not a TYPE_CHECKING block)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if ".venv" not in path.parts:
                found[module_name(path)] = path
    return found


def _resolve(name: str) -> str | None:
    """The project module `name` refers to (a module, or the module defining the name)."""
    known = modules()
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _walk(node: ast.AST, nested: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield child, inner
        yield from _walk(child, inner)


@cache
def imports() -> tuple[Import, ...]:
    found: list[Import] = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, nested in _walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                resolved = _resolve(target)
                if resolved is not None and resolved != name:
                    found.append(Import(name, resolved, nested))
    return tuple(found)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def edges_from(package: str) -> list[Import]:
    return [i for i in imports() if _in(i.source, package)]


def test_codec_imports_nothing_of_the_project() -> None:
    assert [i for i in edges_from("codec") if not _in(i.target, "codec")] == []


def test_reference_broker_never_imports_the_harness_or_the_reports() -> None:
    bad = [i for i in edges_from("reference_broker") if _in(i.target, "conformance") or _in(i.target, "reports")]
    assert bad == []


def test_core_concerns_never_import_the_router() -> None:
    bad = [i for i in edges_from("reference_broker.core") if i.target == "reference_broker.core.router"
           and i.source not in ("reference_broker.core",)]
    assert bad == []


def test_the_core_is_pure() -> None:
    """reference_broker/core reads no clock, environment, socket or randomness and does no I/O:
    none of the modules that could is imported there (faults come in through BrokerConfig)."""
    impure = {"os", "time", "random", "socket", "asyncio", "logging", "threading", "selectors", "sqlite3"}
    for name, path in modules().items():
        if not _in(name, "reference_broker.core"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom) and not node_is_local(node):
                tops = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not {top.split(".")[0] for top in tops} & impure, (name, tops)


def test_model_imports_only_the_standard_library_and_codec_constants() -> None:
    bad = [i for i in edges_from("conformance.model")
           if not _in(i.target, "conformance.model") and i.target != "codec.constants"]
    assert bad == []
    for name, path in modules().items():
        if not _in(name, "conformance.model"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                top = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                assert node_is_local(node) or top in sys.stdlib_module_names or top in PROJECT, (name, top)


def node_is_local(node: ast.Import | ast.ImportFrom) -> bool:
    return isinstance(node, ast.ImportFrom) and node.level > 0


def test_exactly_one_harness_module_imports_the_reference_broker() -> None:
    importers = {i.source for i in edges_from("conformance") if _in(i.target, "reference_broker")}
    assert importers == {"conformance.embedded"}


def test_exactly_one_harness_module_imports_the_reports() -> None:
    """The front door (`amqp-conformance`, conformance/cli.py) hands the subcommands that build a
    report the callable that does it; nothing else of the harness reaches up to the reports."""
    importers = {i.source for i in edges_from("conformance") if _in(i.target, "reports")}
    assert importers == {"conformance.cli"}


def test_the_catalogue_imports_nothing_else_of_the_harness() -> None:
    bad = [i for i in edges_from("conformance.catalogue")
           if _in(i.target, "conformance") and not _in(i.target, "conformance.catalogue")]
    assert bad == []


def test_reports_import_the_harness_only_for_the_results_schema_and_the_catalogue() -> None:
    # the results kernel (conformance.results: the records schema, verdicts, wording); the catalogue: rules, areas, profiles; and the model,
    # the oracle the trace audit judges recorded traffic with (one copy of each rule),
    # and the upgrade pre-flight's pure core (shapes, judging, replay). What the clients matrix
    # shows of a client-side run (language, scenario titles and order) is in its records.
    allowed = ("conformance.results", "conformance.catalogue", "conformance.model", "conformance.preflight")
    bad = [i for i in edges_from("reports")
           if _in(i.target, "conformance") and not any(_in(i.target, a) for a in allowed)]
    assert bad == []


def test_no_pytest_in_the_results_kernel_or_the_reports() -> None:
    """The results kernel and the Spark reports run without pytest: neither imports
    it, nor any project module that does (the pytest plugin, the suite)."""
    for name, path in modules().items():
        if not (_in(name, "conformance.results") or _in(name, "reports")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                tops = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(t.split(".")[0] in ("pytest", "_pytest") for t in tops), (name, tops)
    reach = [i for i in imports() if (_in(i.source, "conformance.results") or _in(i.source, "reports"))
             and (_in(i.target, "conformance.plugin") or _in(i.target, "conformance.suite"))]
    assert reach == []


PYTEST_SIDE = ("conformance.plugin", "conformance.suite", "conformance.client_suite",
               "conformance.gate.runner", "conformance.gate.collect")


def _imports_pytest(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            tops = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(t.split(".")[0] in ("pytest", "_pytest") for t in tops):
                return True
    return False


def test_only_the_plugin_the_suites_and_the_in_process_runner_reach_pytest() -> None:
    """pytest is an adapter's world: the plugin, the suites (broker side and client side) and the
    in-process runner (`gate.runner`, `gate.collect`) import it; no other harness module does,
    directly or through a project module it imports (at any depth), but the command lines that
    start the in-process runner (`conformance.cli`, `conformance.gate.cli`)."""
    harness = {name: path for name, path in modules().items() if _in(name, "conformance")}
    reaches = {name for name, path in harness.items() if _imports_pytest(path)}
    edges = [(i.source, i.target) for i in imports() if i.source in harness and i.target in harness]
    grew = True
    while grew:  # the modules that reach pytest through an import, to a fixed point
        more = {source for source, target in edges if target in reaches} - reaches
        reaches |= more
        grew = bool(more)
    starters = {"conformance.cli", "conformance.gate.cli"}
    outside = sorted(name for name in reaches - starters if not any(_in(name, side) for side in PYTEST_SIDE))
    assert outside == [], f"reach pytest outside the plugin, the suites and the in-process runner: {outside}"


def test_only_the_audit_plan_and_findings_use_spark() -> None:
    """The trace audit keeps the driver's side apart: Spark plans in reports.audit.plan,
    frame windows in reports.audit.findings; the work of a task (partition, context, lake, channel)
    is pyarrow and the model, testable and runnable without Spark."""
    for name, path in modules().items():
        if not _in(name, "reports.audit") or name in ("reports.audit.plan", "reports.audit.findings"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                tops = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(t.split(".")[0] == "pyspark" for t in tops), (name, tops)
    spark_side = {"reports.audit.plan", "reports.audit.findings"}
    assert not [i for i in imports() if _in(i.source, "reports.audit") and i.source not in spark_side
                and i.target in spark_side]


def test_the_results_kernel_imports_no_other_part_of_the_harness() -> None:
    """conformance.results is the ground floor of the harness: it imports codec, the catalogue and the
    model's generic wordings (a baseline entry may not accept them);
    the outcomes and frame record every driver shares are its own (`results.observations`), never
    a driver's, the plugin's, the gate's, the client judge's or the reports'."""
    allowed = ("conformance.results", "conformance.catalogue", "conformance.model.wording", "codec")
    bad = [i for i in edges_from("conformance.results") if not any(_in(i.target, a) for a in allowed)]
    assert bad == []


def test_the_interposer_imports_only_codec_and_the_results_kernel() -> None:
    """conformance.interpose, the one relay, serves the traffic recorder, the client
    drivers and the tests' proxies: it imports none of them, only codec and the results records."""
    allowed = ("conformance.interpose", "conformance.results", "codec")
    bad = [i for i in edges_from("conformance.interpose") if not any(_in(i.target, a) for a in allowed)]
    assert bad == []
    assert ("conformance.drivers.relay", "conformance.interpose.relay") in {(i.source, i.target) for i in imports()}


# The one nested import, with its reason: the `target` fixture starts an embedded reference broker
# only when no URL is given; every worker of `amqp-conformance run` is given one, and importing the
# broker (its server, aiohttp) cost each of them about 0.35 CPU-s at start (docs/benchmarks.md).
NESTED_ALLOWED = {("conformance.plugin.fixtures", "conformance.embedded")}


def test_project_imports_are_at_module_level_in_the_core_and_the_harness() -> None:
    bad = [i for i in imports() if i.nested and (_in(i.source, "reference_broker.core") or _in(i.source, "conformance"))
           and (i.source, i.target) not in NESTED_ALLOWED]
    assert bad == []
    nested = {(i.source, i.target) for i in imports() if i.nested}
    assert nested >= NESTED_ALLOWED, "an allowed nested import is gone: remove it from NESTED_ALLOWED"


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for i in imports():
        graph[i.source].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_import_cycle() -> None:
    assert cycles() == []


def test_the_checker_sees_imports() -> None:
    """The checker is not vacuous: it finds known edges of every kind."""
    pairs = {(i.source, i.target) for i in imports()}
    assert ("reference_broker.core.router", "reference_broker.core.consumers") in pairs
    assert ("conformance.embedded", "reference_broker.server") in pairs
    assert ("reports.build", "conformance.catalogue.rules") in pairs
    assert any(i.nested for i in imports())


def test_the_suite_areas_share_only_the_steps() -> None:
    """conformance/suite: an area's tests and machine import the shared steps (conformance.suite.steps)
    and their own area, never another area nor a test module, so a suite file moves or splits alone."""
    def area(module: str) -> str:
        return module.split(".")[2] if module.count(".") >= 2 else ""

    inner = [i for i in edges_from("conformance.suite") if i.target.startswith("conformance.suite.")]
    bad = [i for i in inner
           if i.target.rsplit(".", 1)[-1].startswith("test_") or area(i.target) not in ("steps", area(i.source))]
    assert bad == []


def package_loops() -> list[tuple[str, str]]:
    """Pairs of conformance subpackages that reach each other through their imports."""
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for i in imports():
        if _in(i.source, "conformance") and _in(i.target, "conformance") and package(i.source) != package(i.target):
            edges.setdefault(package(i.source), set()).add(package(i.target))

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    return sorted((a, b) for a in edges for b in edges[a] if a in reach(b))


def test_no_package_level_loop_in_the_harness() -> None:
    """A package of the harness never reaches back to a package that reaches it: no loop between the
    rooms of the house."""
    assert package_loops() == []

