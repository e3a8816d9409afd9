"""The admin adapter over `rabbitmqctl` (conformance.run.admin's module rules).

Responsibility: `Rabbitmqctl`: every call a `rabbitmqctl` command (`AMQPC_RABBITMQCTL` names
it, e.g. one run in a chroot) under a timeout; its JSON and Erlang terms read back.

Rules:
- The frequent calls (the `eval`s: settings, alarms, nodes; and policies) go through one
  `rabbitmqctl eval` kept open (conformance.run.admin_ctl_session), started at the first of
  them; where it does not start, each is its own rabbitmqctl command, as every other call is.
- Through the session a policy call is the function the rabbitmqctl command calls on the node,
  with the same arguments (RabbitMQ v3.10.8 and v4.3.5 `set_policy_command.ex` and its
  siblings: `rabbit_policy:parse_set/7`, `parse_set_op/7`, `delete/3`, `delete_op/3`, acting
  user `<<"rmq-cli">>`, the priority an integer, the definition JSON text); reading one is
  `rabbit_policy:lookup/2` (`lookup_op/2`), the proplist `list_policies` lists.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
from typing import Any

from conformance.run.admin_base import (
    AdminAdapter,
    AdminError,
    ConnectionInfo,
    GlobalValue,
    Policy,
    QueueInfo,
    _resource,
)
from conformance.run.admin_ctl_session import CtlSession, erl_binary

_ATOM = re.compile(r"[a-z][a-z0-9_]*")


class Rabbitmqctl(AdminAdapter):
    """`rabbitmqctl` on this machine (or `$AMQPC_RABBITMQCTL`, e.g. "docker exec rmq rabbitmqctl")."""

    def __init__(self, command: str | None = None, timeout: float = 30.0, *, session: bool = True) -> None:
        self.command = shlex.split(command or os.environ.get("AMQPC_RABBITMQCTL", "rabbitmqctl"))
        self.timeout = timeout
        self._session: CtlSession | None = None
        self._session_tried = not session  # after a session failed: a command per call
        self._session_lock = threading.Lock()

    def close(self) -> None:
        with self._session_lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def session(self) -> CtlSession | None:
        """The kept `rabbitmqctl eval` (started on first use, again after it ended idle or found no
        free slot), or None: no slot free now, or a session failed once (then a command per call)."""
        with self._session_lock:
            if self._session is not None and self._session.alive:
                return self._session
            if self._session is not None and not self._session.idle_ended:
                self._session_tried = True  # it failed (no answer, rabbitmqctl exited): no other try
            self._session = None
            if self._session_tried:
                return None
            session = CtlSession(self.command, self.timeout)
            if session.start():
                self._session = session
            elif not session.no_slot:
                self._session_tried = True
            return self._session

    def eval(self, expression: str) -> str:
        """`rabbitmqctl eval EXPRESSION`'s value as Erlang text (through the session if it runs)."""
        session = self.session()
        return session.call(expression) if session is not None else self.run("eval", expression)

    def describe(self) -> str:
        return "rabbitmqctl"

    def run(self, *args: str) -> str:
        argv = [*self.command, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        except FileNotFoundError:
            raise AdminError(f"{self.command[0]} not found") from None
        except subprocess.TimeoutExpired:
            raise AdminError(f"rabbitmqctl {args[0]}: no answer within {self.timeout:.0f} s") from None
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise AdminError(f"rabbitmqctl {args[0]} exited {done.returncode}: {lines[-1] if lines else ''}")
        return done.stdout

    def _json(self, *args: str) -> list[dict[str, Any]]:
        out = self.run(*args, "-q", "--formatter", "json")
        return list(json.loads(out)) if out.strip() else []

    def list_queues(self, vhost: str) -> list[QueueInfo]:
        rows = self._json("list_queues", "-p", vhost, "name", "messages", "consumers", "type", "arguments")
        return [QueueInfo(r["name"], vhost, r.get("messages"), r.get("consumers"), r.get("type"),
                          _table(r.get("arguments"))) for r in rows]

    def list_exchanges(self, vhost: str) -> list[str]:
        return [r["name"] for r in self._json("list_exchanges", "-p", vhost, "name")]

    def list_connections(self) -> list[ConnectionInfo]:
        rows = self._json("list_connections", "name", "user", "vhost", "peer_port", "client_properties", "timeout")
        return [ConnectionInfo(r["name"], r.get("user"), r.get("vhost"), r.get("peer_port"),
                               _table(r.get("client_properties")), r.get("timeout")) for r in rows]

    def close_connection(self, name: str, reason: str = "closed by amqp-conformance") -> None:
        # close_connection takes the connection's pid; the JSON formatter mangles pids, the tab one doesn't
        for line in self.run("list_connections", "-q", "pid", "name").splitlines():
            pid, _, listed = line.partition("\t")
            if listed == name:
                self.run("close_connection", pid, reason)
                return

    def get_policy(self, vhost: str, name: str, *, operator: bool = False) -> Policy | None:
        session = self.session()
        if session is not None:
            lookup = "lookup_op" if operator else "lookup"
            found = session.call_json(
                f"case rabbit_policy:{lookup}({erl_binary(vhost)}, {erl_binary(name)}) of "
                "not_found -> {amqpc_json, <<\"null\">>}; P -> D = proplists:get_value(definition, P), "
                "{amqpc_json, rabbit_json:encode(#{<<\"pattern\">> => proplists:get_value(pattern, P), "
                "<<\"apply-to\">> => proplists:get_value('apply-to', P), "
                "<<\"priority\">> => proplists:get_value(priority, P), "
                "<<\"definition\">> => case is_list(D) of true -> maps:from_list(D); false -> D end})} end.")
            if found is None:
                return None
            return Policy(vhost, name, found["pattern"], dict(found["definition"]), found.get("apply-to") or "all",
                          int(found.get("priority") or 0))
        for r in self._json("list_operator_policies" if operator else "list_policies", "-p", vhost):
            if r["name"] == name:
                definition = r["definition"]
                return Policy(vhost, name, r["pattern"], json.loads(definition) if isinstance(definition, str)
                              else dict(definition), r.get("apply-to", "all"), int(r.get("priority", 0)))
        return None

    def put_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   apply_to: str = "queues", priority: int = 0, *, operator: bool = False) -> None:
        session = self.session()
        if session is not None:
            done = session.call(
                f"rabbit_policy:{'parse_set_op' if operator else 'parse_set'}({erl_binary(vhost)}, {erl_binary(name)}, "
                f"{erl_binary(pattern)}, {erl_binary(json.dumps(definition))}, {int(priority)}, "
                f"{erl_binary(apply_to)}, <<\"rmq-cli\">>).")
            if done != "ok":
                raise AdminError(f"rabbitmqctl {_policy_command('set', operator)}: {done}")
            return
        self.run(_policy_command("set", operator), "-p", vhost, "--priority", str(priority),
                 "--apply-to", apply_to, name, pattern, json.dumps(definition))

    def delete_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        session = self.session()
        if session is not None:
            done = session.call(f"rabbit_policy:{'delete_op' if operator else 'delete'}({erl_binary(vhost)}, "
                                f"{erl_binary(name)}, <<\"rmq-cli\">>).")
            if done != "ok" and "does not exist" not in done:
                raise AdminError(f"rabbitmqctl {_policy_command('clear', operator)}: {done}")
            return
        try:
            self.run(_policy_command("clear", operator), "-p", vhost, name)
        except AdminError as exc:
            if "does not exist" not in str(exc):
                raise

    def get_global(self, key: str) -> GlobalValue:
        out = self.eval(f"application:get_env(rabbit, {_atom(key)}).").strip()
        if out == "undefined":
            return None
        match = re.fullmatch(r"\{ok,\s*(.+)\}", out)
        term = match.group(1) if match else ""
        if term in ("true", "false"):
            return term == "true"
        if re.fullmatch(r"-?\d+", term):
            return int(term)
        raise AdminError(f"rabbit.{key} = {out}: not an integer or a boolean")

    def set_global(self, key: str, value: GlobalValue) -> None:
        if value is None:
            self.eval(f"application:unset_env(rabbit, {_atom(key)}).")
            return
        if not isinstance(value, int):  # bool is an int
            raise TypeError(f"rabbit.{key}: an integer or a boolean, not {value!r}")
        term = str(value).lower() if isinstance(value, bool) else str(value)
        self.eval(f"application:set_env(rabbit, {_atom(key)}, {term}).")


    def put_user(self, name: str, password: str, tags: str = "") -> None:
        self.run("add_user", name, password)  # never in describe() nor in an error (run names args[0] only)
        if tags:
            self.run("set_user_tags", name, *tags.split(","))

    def delete_user(self, name: str) -> None:
        self._missing_ok("delete_user", name)

    def put_vhost(self, name: str) -> None:
        self.run("add_vhost", name)

    def delete_vhost(self, name: str) -> None:
        self._missing_ok("delete_vhost", name)

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> None:
        self.run("set_permissions", "-p", vhost, user, configure, write, read)

    def set_topic_permissions(self, vhost: str, user: str, exchange: str, write: str, read: str) -> None:
        self.run("set_topic_permissions", "-p", vhost, user, exchange, write, read)

    def node_names(self) -> list[str]:
        """rabbit_nodes:list_members() (`rabbit_mnesia:cluster_nodes(all)` before 3.12), on the node rabbitmqctl reaches."""
        out = self.eval("try rabbit_nodes:list_members() catch _:_ -> rabbit_mnesia:cluster_nodes(all) end.")
        return re.findall(r"'?([\w.-]+@[\w.-]+)'?", out)

    def alarms(self) -> frozenset[str]:
        """rabbit_alarm:get_alarms() on the node rabbitmqctl reaches (alarms are cluster-wide)."""
        out = self.eval("rabbit_alarm:get_alarms().")
        return frozenset(re.findall(r"resource_limit,\s*(memory|disk)", out))

    def set_alarm(self, resource: str, on: bool) -> None:
        """rabbit_alarm:set_alarm / clear_alarm, the calls the memory and disk monitors make (and
        RabbitMQ's own client test suites use): the alarm stays until cleared, whatever the
        watermarks say. Both are `gen_event:notify` (asynchronous, 3.10.8 to 4.3), so the same eval
        then calls `get_alarms()`, a `gen_event:call` queued behind the notify: when it returns, the
        handler has sent every local connection its `conserve_resources` message (rabbit_alarm
        maybe_alert -> alert_local), and a publish sent afterwards reaches each reader behind it.
        Without it a publish could beat the alarm, go through, and never be blocked."""
        alarm = f"{{resource_limit, {_resource(resource)}, node()}}"
        change = f"rabbit_alarm:set_alarm({{{alarm}, []}})" if on else f"rabbit_alarm:clear_alarm({alarm})"
        self.eval(f"{change}, rabbit_alarm:get_alarms().")

    def _missing_ok(self, *args: str) -> None:
        try:
            self.run(*args)
        except AdminError as exc:
            if "does not exist" not in str(exc) and "no_such" not in str(exc):
                raise


def _policy_command(verb: str, operator: bool) -> str:
    """rabbitmqctl's set or clear command for a policy: set_policy, clear_operator_policy, ..."""
    return f"{verb}_operator_policy" if operator else f"{verb}_policy"


def _atom(key: str) -> str:
    if not _ATOM.fullmatch(key):
        raise ValueError(f"not a setting name: {key!r}")
    return key


def _table(value: Any) -> dict[str, Any]:
    """rabbitmqctl's JSON field table ([[key, type, value], ...]) as a dict."""
    if isinstance(value, dict):
        return value
    table: dict[str, Any] = {}
    for entry in value or []:
        if isinstance(entry, list) and len(entry) == 3:
            key, kind, item = entry
            table[str(key)] = _table(item) if kind == "table" else item
    return table
