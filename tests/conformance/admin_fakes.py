"""In-memory admins for the admin adapters' tests (test_admin.py, test_admin_accounts.py):
policies and settings (`MemoryAdmin`), users and vhosts too (`AccountsAdmin`), and a rabbitmqctl
whose command lines are recorded and whose output is canned (`CannedRabbitmqctl`)."""

from __future__ import annotations

from typing import Any

from conformance.run.admin import AdminError, GlobalValue, NoAdmin, Policy, Rabbitmqctl


class MemoryAdmin(NoAdmin):
    """Policies and settings in memory; `fail_undo` makes restoring fail."""

    def __init__(self) -> None:
        self.policies: dict[tuple[str, str], Policy] = {}
        self.settings: dict[str, GlobalValue] = {"consumer_timeout": 1_800_000}
        self.fail_undo = False

    def get_policy(self, vhost: str, name: str, *, operator: bool = False) -> Policy | None:
        return self.policies.get((vhost, name))

    def put_policy(self, vhost: str, name: str, pattern: str, definition: dict[str, Any],
                   apply_to: str = "queues", priority: int = 0, *, operator: bool = False) -> None:
        self.policies[vhost, name] = Policy(vhost, name, pattern, definition, apply_to, priority)

    def delete_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        if self.fail_undo:
            raise AdminError("management API DELETE: HTTP 503")
        self.policies.pop((vhost, name), None)

    def get_global(self, key: str) -> GlobalValue:
        return self.settings.get(key)

    def set_global(self, key: str, value: GlobalValue) -> None:
        self.settings[key] = value


class AccountsAdmin(MemoryAdmin):
    """Users and vhosts in memory, for RestoringAdmin."""

    def __init__(self) -> None:
        super().__init__()
        self.users: dict[str, str] = {}
        self.vhosts: set[str] = {"/"}

    def put_user(self, name: str, password: str, tags: str = "") -> None:
        self.users[name] = tags

    def delete_user(self, name: str) -> None:
        self.users.pop(name, None)

    def put_vhost(self, name: str) -> None:
        self.vhosts.add(name)

    def delete_vhost(self, name: str) -> None:
        self.vhosts.discard(name)


class CannedRabbitmqctl(Rabbitmqctl):
    """Records argv and answers from `outputs` (first word of the command -> stdout)."""

    def __init__(self, outputs: dict[str, str]) -> None:
        super().__init__("rabbitmqctl", session=False)
        self.outputs = outputs
        self.calls: list[list[str]] = []

    def run(self, *args: str) -> str:
        self.calls.append(list(args))
        return self.outputs.get(" ".join(args[:2]), self.outputs.get(args[0], ""))
