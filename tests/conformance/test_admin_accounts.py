"""Tests of the admin adapters' users, vhosts, permissions and topic permissions (the access
area's needs; conformance/run/admin.py and conformance/run/restoring.py): the management API's
paths and rabbitmqctl's command lines (canned), and what `RestoringAdmin` undoes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from conformance.run.admin import AdminError, ManagementApi, NoAdmin, Rabbitmqctl, Unavailable
from conformance.run.restoring import RestoringAdmin
from tests.conformance.admin_fakes import AccountsAdmin, CannedRabbitmqctl


def test_management_api_users_vhosts_and_permissions_paths() -> None:
    seen: list[tuple[str, str, Any]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.raw_path.decode(), json.loads(request.content or b"null")))
        return httpx.Response(404 if request.method == "DELETE" else 201)

    api = ManagementApi("http://admin:pw@mgmt:15672", transport=httpx.MockTransport(record))
    api.put_user("amqpc.u", "secret", "impersonator")
    api.put_vhost("amqpc/v")
    api.set_permissions("amqpc/v", "amqpc.u", "^c", "^w", "^r")
    api.set_topic_permissions("/", "amqpc.u", "amq.topic", "^{username}", "")
    api.delete_user("amqpc.u")  # a 404 (gone already) is not an error
    api.delete_vhost("amqpc/v")
    assert seen == [
        ("PUT", "/api/users/amqpc.u", {"password": "secret", "tags": "impersonator"}),
        ("PUT", "/api/vhosts/amqpc%2Fv", {}),
        ("PUT", "/api/permissions/amqpc%2Fv/amqpc.u", {"configure": "^c", "write": "^w", "read": "^r"}),
        ("PUT", "/api/topic-permissions/%2F/amqpc.u", {"exchange": "amq.topic", "write": "^{username}", "read": ""}),
        ("DELETE", "/api/users/amqpc.u", None),
        ("DELETE", "/api/vhosts/amqpc%2Fv", None)]
    api.close()


def test_rabbitmqctl_users_vhosts_and_permissions_command_lines() -> None:
    ctl = CannedRabbitmqctl({})
    ctl.put_user("amqpc.u", "secret")
    ctl.put_user("amqpc.i", "secret", "impersonator,management")
    ctl.put_vhost("amqpc.v")
    ctl.set_permissions("amqpc.v", "amqpc.u", "^c", "", "^r")
    ctl.set_topic_permissions("/", "amqpc.u", "amq.topic", "^{username}", "^x")
    ctl.delete_user("amqpc.u")
    ctl.delete_vhost("amqpc.v")
    assert ctl.calls == [
        ["add_user", "amqpc.u", "secret"], ["add_user", "amqpc.i", "secret"],
        ["set_user_tags", "amqpc.i", "impersonator", "management"], ["add_vhost", "amqpc.v"],
        ["set_permissions", "-p", "amqpc.v", "amqpc.u", "^c", "", "^r"],
        ["set_topic_permissions", "-p", "/", "amqpc.u", "amq.topic", "^{username}", "^x"],
        ["delete_user", "amqpc.u"], ["delete_vhost", "amqpc.v"]]
    failing = Rabbitmqctl("sh -c 'echo Error: >&2; echo User \"x\" does not exist >&2; exit 69' --")
    failing.delete_user("x")  # a missing user is not an error
    with pytest.raises(AdminError, match="exited 69"):
        failing.put_vhost("x")


def test_restoring_admin_deletes_the_users_and_vhosts_it_made_without_a_broker_wide_claim() -> None:
    memory = AccountsAdmin()
    claims: list[int] = []
    view = RestoringAdmin(memory, "/", claim=lambda: claims.append(1))
    view.put_vhost("amqpc.v")
    view.put_user("amqpc.u", "pw", "impersonator")
    assert memory.users == {"amqpc.u": "impersonator"} and "amqpc.v" in memory.vhosts
    assert claims == []  # a user or vhost of the test's own name is seen by no other test
    view.restore()
    assert memory.users == {} and memory.vhosts == {"/"}


def test_end_broker_wide_puts_the_globals_back_at_once_and_ends_the_claim() -> None:
    memory = AccountsAdmin()
    events: list[str] = []
    view = RestoringAdmin(memory, "/", claim=lambda: events.append("claim"), release=lambda: events.append("release"))
    before = memory.get_global("consumer_timeout")
    view.put_user("amqpc.u", "pw")
    view.set_global("consumer_timeout", 200)
    assert memory.get_global("consumer_timeout") == 200 and events == ["claim"]
    view.end_broker_wide()
    assert memory.get_global("consumer_timeout") == before and events == ["claim", "release"]
    assert memory.users == {"amqpc.u": ""}  # the rest waits for teardown
    with pytest.raises(AdminError, match="after end_broker_wide"):
        view.set_global("consumer_timeout", 100)
    view.restore()
    assert memory.users == {} and memory.get_global("consumer_timeout") == before


def test_no_admin_has_no_users() -> None:
    with pytest.raises(Unavailable, match="needs --broker-admin"):
        RestoringAdmin(NoAdmin()).put_user("amqpc.u", "pw")
    claims: list[int] = []
    view = RestoringAdmin(NoAdmin(), claim=lambda: claims.append(1))
    with pytest.raises(Unavailable):
        view.put_vhost("amqpc.v")
    assert claims == [] and view._undo == []  # nothing claimed, nothing to undo
    view.restore()
