"""The options of a run, declared once: `amqp-conformance run` and the pytest plugin both add them
from here (`add_to_argparse`, `add_to_pytest`).

Rules:
- Each option is one `Option`: its flag, help, default and argparse settings. The front door adds
  `RUN_OPTIONS` (and the gate's own `GATE_OPTIONS`) to its parser; the pytest plugin adds
  `RUN_OPTIONS` and `PLUGIN_OPTIONS` to its group. A flag is declared nowhere else.
- A default read from the environment (`env`) is read when the option is added, so a test that
  sets the variable sees it.
- Values are validated once, where the run's configuration is built, not here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from conformance.catalogue.profiles import NEWEST, choices
from conformance.catalogue.rules import CAPABILITIES
from conformance.drivers.registry import suite_clients

TEST_BUDGET = 300.0  # s per rule test, before --timeout-scale (the watchdog's)
SESSION_BASE, SESSION_PER_TEST = 300.0, 30.0  # s, before --timeout-scale


@dataclass(frozen=True)
class Option:
    flag: str
    help: str | Callable[[], str]  # a callable: built when added (it reads the catalogue or the registry)
    default: Any = None
    metavar: str | None = None
    action: str | None = None
    type: Callable[[str], Any] | None = None
    nargs: str | None = None
    env: str | None = None  # the default comes from this environment variable when set

    def kwargs(self) -> dict[str, Any]:
        found: dict[str, Any] = {"help": self.help() if callable(self.help) else self.help,
                                 "default": os.environ.get(self.env, self.default) if self.env else self.default}
        for key in ("metavar", "action", "type", "nargs"):
            if getattr(self, key) is not None:
                found[key] = getattr(self, key)
        return found


def _profile_help() -> str:
    return ("auto (default: the base from server-properties plus the advertised capabilities) or one of: "
            + ", ".join(choices()[1:]))


def _client_help() -> str:
    return (f"{' | '.join(suite_clients())}: the suite through that client library (raw, the default: the "
            "project's codec); tests it cannot express are not-applicable, with the reason")


RUN_OPTIONS: tuple[Option, ...] = (
    Option("--broker-url", "amqp://user:pass@host:port/vhost (default: an embedded reference broker)",
           metavar="URL", env="AMQPC_BROKER_URL"),
    Option("--profile", _profile_help, "auto", "P"),
    Option("--capability", f"a capability the broker claims beyond those it advertises (repeat): "
                           f"{', '.join(CAPABILITIES)}", [], "NAME", "append"),
    Option("--extension-profile", f"the RabbitMQ profile that judges claimed extensions on a non-RabbitMQ broker "
                                  f"(default {NEWEST})", NEWEST, "P"),
    Option("--client", _client_help, "raw", "C"),
    Option("--broker-admin", "management API URL (http://user:pass@host:15672), 'rabbitmqctl' or 'none' "
                             "(default: none; the embedded broker's own API when no URL is given)", None, "A"),
    Option("--select", "only these areas or rule IDs (see `amqp-conformance rules`; repeat, or space- or "
                       "comma-separated)", [], "AREA|RULE", "extend", nargs="+"),
    Option("--timeout-scale", "multiply every wait by X", 1.0, "X", type=float),
    Option("--test-timeout", f"watchdog: interrupt a test that takes longer than S seconds (broken; exit 3 only if a "
                             f"fresh connection then fails), 0 = never (default {TEST_BUDGET:g} x the timeout scale)",
           None, "S", type=float),
    Option("--run-timeout", f"watchdog: end the run (exit 3) after S seconds, 0 = never (default ({SESSION_BASE:g} + "
                            f"{SESSION_PER_TEST:g} per test) x the timeout scale)", None, "S", type=float),
    Option("--run-id", "id of this run in the results (default: a new one)", None, "ID"),
    Option("--cluster-node", "another node of the broker's cluster, amqp://... (repeat; --broker-url is node 1); the "
                             "cluster tests need them and --node-control (else needs-cluster); 'embedded' without "
                             "--broker-url: the embedded reference broker as a 3-node cluster with its own node control",
           [], "URL", "append"),
    Option("--node-control", "stops or starts one node and returns when it is down or up: placeholders {url}, "
                             "{index} (1 = --broker-url, then the --cluster-node order) and {action} (stop|start), "
                             "e.g. 'scripts/rabbitmq4.sh node 4.3 {index} {action}'", None, "COMMAND"),
)

PLUGIN_OPTIONS: tuple[Option, ...] = (  # plain pytest only: `amqp-conformance run` writes into --out
    Option("--results-dir", "write run/test/frame records here (Parquet)", None, "DIR"),
)


def add_to_argparse(parser: Any, options: Iterable[Option]) -> None:
    for option in options:
        parser.add_argument(option.flag, **option.kwargs())


def add_to_pytest(group: Any, options: Iterable[Option]) -> None:
    for option in options:
        group.addoption(option.flag, **option.kwargs())
