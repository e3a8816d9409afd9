"""A broker's address, parsed from an amqp:// URL: host, port, user, password and virtual host."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlparse


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    user: str
    password: str
    vhost: str

    @property
    def key(self) -> tuple[str, int, str]:
        """Which broker this is, for what a run learns about it (silence.py)."""
        return self.host, self.port, self.vhost

    @classmethod
    def parse(cls, url: str) -> BrokerAddress:
        """amqp://user:pass@host:port/vhost (vhost "" or "/" means "/", %2f allowed)."""
        parts = urlparse(url)
        if parts.scheme != "amqp" or not parts.hostname:
            raise ValueError(f"not an amqp:// URL: {url!r}")
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        return cls(parts.hostname, parts.port or 5672, unquote(parts.username or "guest"),
                   unquote(parts.password or "guest"), vhost)
