"""The adapter protocol: a `ClientDriver` spoken as JSON lines, so any language can be driven.

An adapter is a program (any language) that drives one client library. The harness starts it
with its stdin and stdout as pipes; each line is one JSON object (UTF-8, no embedded newline).

- adapter → harness, first line: ``{"event": "hello", "client": "pika", "version": "1.4.4",
  "language": "python", "runtime": "CPython 3.11.2", "api": "BlockingConnection",
  "features": [...]}``.
- harness → adapter, requests: ``{"id": 7, "op": "publish", "args": {...}}``. ``op`` is a
  `ClientDriver` method name; ``args`` its keyword arguments (`OPS` lists them). ``bye`` ends
  the adapter.
- adapter → harness, one reply per request: ``{"id": 7, "ok": true, "value": ...}`` or
  ``{"id": 7, "ok": false, "error": {"kind": ..., "code": ..., "text": ..., "class_id": ...,
  "method_id": ..., "type": ...}}``; ``kind`` is one of `ERROR_KINDS` ("exception": the library
  raised something that is not a close; ``type`` names the exception class).
- adapter → harness, events at any time between replies: ``{"event": "<kind>", ...}`` with the
  fields of the `interface` event of that KIND (a delivery's fields nested under "delivery").
- An adapter keeps running the client between requests (its I/O loop), so callbacks fire and
  events flow while the harness waits.

Encoding: bytes are ``{"$b64": "..."}`` (bodies, and byte values inside header tables);
properties are objects with codec's `BasicProperties` field names, only the present ones.
"""

from __future__ import annotations

import base64
import json
from dataclasses import fields
from typing import Any

from codec import BasicProperties
from conformance.drivers import interface as di

OPS = {
    "connect": ("url", "heartbeat", "frame_max", "channel_max"),
    "close": (),
    "open_channel": (),
    "close_channel": ("channel",),
    "declare_queue": ("channel", "queue", "durable", "exclusive", "auto_delete", "passive", "arguments"),
    "declare_exchange": ("channel", "exchange", "kind", "durable", "passive"),
    "bind_queue": ("channel", "queue", "exchange", "routing_key"),
    "delete_queue": ("channel", "queue"),
    "qos": ("channel", "prefetch_count", "global_"),
    "publish": ("channel", "exchange", "routing_key", "body", "properties", "mandatory"),
    "confirm_select": ("channel",),
    "consume": ("channel", "queue", "consumer_tag", "no_ack", "exclusive", "arguments"),
    "cancel": ("channel", "consumer_tag"),
    "get": ("channel", "queue", "no_ack"),
    "ack": ("channel", "delivery_tag", "multiple"),
    "nack": ("channel", "delivery_tag", "multiple", "requeue"),
    "reject": ("channel", "delivery_tag", "requeue"),
    "recover": ("channel", "requeue"),
    "tx_select": ("channel",),
    "tx_commit": ("channel",),
    "tx_rollback": ("channel",),
    "state": (),
    "bye": (),
}
ERROR_KINDS = ("channel-closed", "connection-closed", "connection-lost", "unsupported", "no-reply", "exception")


def dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, default=_default, separators=(",", ":"))


def loads(line: str) -> dict[str, Any]:
    value = json.loads(line, object_hook=_hook)
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object: {line[:80]!r}")
    return value


def _default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, BasicProperties):
        return di.present(value)
    raise TypeError(f"cannot encode {type(value).__name__} in the adapter protocol")


def _hook(obj: dict[str, Any]) -> Any:
    if set(obj) == {"$b64"}:
        return base64.b64decode(obj["$b64"])
    return obj


def properties(value: dict[str, Any] | None) -> BasicProperties:
    return BasicProperties(**(value or {}))


def delivery(value: dict[str, Any]) -> di.Delivery:
    return di.Delivery(**{**value, "properties": properties(value.get("properties"))})


def delivery_to_json(value: di.Delivery) -> dict[str, Any]:
    out = {f.name: getattr(value, f.name) for f in fields(value)}
    out["properties"] = di.present(value.properties)  # a NamedTuple would become a JSON list
    return out


def event_to_json(event: di.Event) -> dict[str, Any]:
    out: dict[str, Any] = {"event": event.KIND}
    for f in fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)
        out[f.name] = delivery_to_json(value) if isinstance(value, di.Delivery) else value
    return out


def event_from_json(obj: dict[str, Any]) -> di.Event:
    kind = obj.get("event")
    cls = di.EVENT_TYPES.get(str(kind))
    if cls is None:
        return di.ClientFailure("ProtocolError", f"unknown event {kind!r} from the adapter", "adapter")
    args = {k: v for k, v in obj.items() if k != "event"}
    if cls is di.Delivered:
        return di.Delivered(delivery(args["delivery"]))
    event: di.Event = cls(**args)
    return event


def error_to_json(exc: BaseException) -> dict[str, Any]:
    """An operation's failure as the protocol's error object."""
    if isinstance(exc, di.Closed):
        return {"kind": f"{exc.scope}-closed", "code": exc.code, "text": exc.text, "class_id": exc.class_id,
                "method_id": exc.method_id, "type": getattr(exc, "library_error", type(exc).__name__)}
    kind = {di.ConnectionLost: "connection-lost", di.Unsupported: "unsupported", di.NoReply: "no-reply"}.get(
        type(exc), "exception")
    return {"kind": kind, "text": str(exc)[:2000], "type": getattr(exc, "library_error", type(exc).__name__)}


class LibraryError(di.DriverError):
    """The library raised an exception that is not a close (its type is kept)."""

    def __init__(self, type_name: str, text: str) -> None:
        super().__init__(f"{type_name}: {text}")
        self.library_error = type_name


def error_from_json(error: dict[str, Any]) -> di.DriverError:
    kind, text = error.get("kind"), str(error.get("text", ""))
    type_name = str(error.get("type") or kind)
    exc: di.DriverError
    if kind in ("channel-closed", "connection-closed"):
        cls = di.ChannelClosed if kind == "channel-closed" else di.ConnectionClosed
        exc = cls(str(kind).split("-")[0], int(error.get("code") or 0), text, int(error.get("class_id") or 0),
                  int(error.get("method_id") or 0))
    elif kind == "connection-lost":
        exc = di.ConnectionLost(text)
    elif kind == "unsupported":
        exc = di.Unsupported(text)
    else:
        return LibraryError(type_name, text)
    object.__setattr__(exc, "library_error", type_name)  # Closed is a frozen dataclass
    return exc


def info_from_hello(obj: dict[str, Any]) -> di.ClientInfo:
    return di.ClientInfo(str(obj.get("client")), str(obj.get("version")), str(obj.get("language")),
                         str(obj.get("runtime")), str(obj.get("api", "")), frozenset(obj.get("features", ())))


def hello(info: di.ClientInfo) -> dict[str, Any]:
    return {"event": "hello", "client": info.client, "version": info.version, "language": info.language,
            "runtime": info.runtime, "api": info.api, "features": sorted(info.features)}
