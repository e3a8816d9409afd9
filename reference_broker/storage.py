"""Durable storage: SQLite in WAL mode, written by one thread with group commit.

Rules:
- The core journals ops (core/durability.py); the server hands each flush's ops to
  `Store.submit`. One writer thread applies everything submitted since its last commit in
  one transaction and commits with `synchronous=FULL` (the WAL is fsynced at each commit):
  fsyncs are batched over whatever arrived while the previous one ran, and happen at once
  when the broker is idle. Then it reports the position reached (`on_stored`), which
  releases the publisher confirms waiting for it.
- Within a batch a put deleted before the commit is never written; a dropped queue's rows
  go with one DELETE.
- Compaction: after COMPACT_EVERY deleted rows, and when the store is idle, the writer
  checkpoints the WAL into the database (TRUNCATE) and returns free pages
  (incremental vacuum), so acked messages stop taking space.
- A crash can leave a torn last WAL frame: SQLite checks every frame's checksum and ignores
  a torn or partial last transaction when it next opens the database (tests show it).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reference_broker.core.durability import encode_properties
from reference_broker.core.journal import Definitions, Delete, Drop, Put, StoredMessage, StoreOp

log = logging.getLogger("reference_broker.storage")
DB_NAME = "broker.db"
COMPACT_EVERY = 10_000  # deleted rows between compactions
SCHEMA = """
CREATE TABLE IF NOT EXISTS definitions (id INTEGER PRIMARY KEY CHECK (id = 1), json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY, vhost TEXT NOT NULL, queue TEXT NOT NULL, exchange TEXT NOT NULL,
    routing_key TEXT NOT NULL, properties BLOB NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS messages_queue ON messages (vhost, queue);
"""


class StorageError(RuntimeError):
    """The data directory cannot be used."""


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect on a new database only
    mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if mode != "wal":
        raise StorageError(f"{path}: SQLite refused WAL mode ({mode})")
    db.execute("PRAGMA synchronous = FULL")
    db.executescript(SCHEMA)
    return db


class Store:
    """One data directory. `load()` once, then `start(on_stored)`, `submit(...)`, `close()`."""

    def __init__(self, data_dir: str | Path) -> None:
        self.dir = Path(data_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.db = _connect(self.dir / DB_NAME)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot use data directory {self.dir}: {exc}") from None
        self._pending: list[StoreOp] = []
        self._position = 0
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._on_stored: Callable[[int], None] = lambda _p: None
        self._deleted_since_compact = 0
        self.commits = 0  # transactions committed (each one fsync of the WAL)
        self.failure: BaseException | None = None

    # -- recovery ----------------------------------------------------------------------
    def load(self) -> tuple[dict[str, Any] | None, list[StoredMessage]]:
        row = self.db.execute("SELECT json FROM definitions WHERE id = 1").fetchone()
        definitions = json.loads(row[0]) if row else None
        messages = [StoredMessage(*r) for r in self.db.execute(
            "SELECT id, vhost, queue, exchange, routing_key, properties, body FROM messages ORDER BY id")]
        return definitions, messages

    def message_count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM messages").fetchone()[0])

    # -- the writer --------------------------------------------------------------------
    def start(self, on_stored: Callable[[int], None]) -> None:
        self._on_stored = on_stored
        self._thread = threading.Thread(target=self._run, name="broker-store", daemon=True)
        self._thread.start()

    def submit(self, ops: Sequence[StoreOp], position: int) -> None:
        with self._cond:
            self._pending.extend(ops)
            self._position = max(self._position, position)
            self._cond.notify()

    def close(self, timeout: float = 10.0) -> None:
        """Write what was submitted, then stop the writer and close the database."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        self.db.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    if not self._cond.wait(timeout=1.0) and self._deleted_since_compact:
                        break  # idle for a second with deletes behind: compact
                ops, self._pending = self._pending, []
                position, closing = self._position, self._closing
            try:
                if ops:
                    self.write(ops)
                    self._on_stored(position)
                elif self._deleted_since_compact:
                    self.compact()
            except Exception as exc:  # a failing disk must be visible, not silent
                log.exception("the store failed; confirms that wait for it will not be sent")
                self.failure = exc
                return
            if closing and not ops:
                return

    def write(self, ops: Sequence[StoreOp]) -> None:
        """Apply ops in one transaction (the caller's thread)."""
        puts: dict[int, Put] = {}
        deletes: list[int] = []
        drops: list[tuple[str, str]] = []
        definitions: Definitions | None = None
        for op in ops:
            if isinstance(op, Put):
                puts[op.id] = op
            elif isinstance(op, Delete):
                if puts.pop(op.id, None) is None:
                    deletes.append(op.id)
            elif isinstance(op, Drop):
                for key in [k for k, p in puts.items() if (p.vhost, p.queue) == (op.vhost, op.queue)]:
                    del puts[key]
                drops.append((op.vhost, op.queue))
            else:
                definitions = op
        db = self.db
        db.execute("BEGIN")
        try:
            if drops:
                db.executemany("DELETE FROM messages WHERE vhost = ? AND queue = ?", drops)
            if deletes:
                db.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in deletes])
            if puts:
                db.executemany("INSERT OR REPLACE INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)", [
                    (p.id, p.vhost, p.queue, p.message.exchange, p.message.routing_key,
                     encode_properties(p.message.properties), p.message.body) for p in puts.values()])
            if definitions is not None:
                db.execute("INSERT OR REPLACE INTO definitions VALUES (1, ?)", (json.dumps(definitions.snapshot),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.commits += 1
        self._deleted_since_compact += len(deletes) + len(drops)
        if self._deleted_since_compact >= COMPACT_EVERY:
            self.compact()

    def compact(self) -> None:
        """Fold the WAL into the database and return the pages acked messages freed."""
        self.db.executescript("PRAGMA incremental_vacuum;")  # execute() would free one page
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        self._deleted_since_compact = 0
