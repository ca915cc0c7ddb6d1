"""Where a local tier keeps its copies: a byte-bounded LRU in memory, optionally over a SQLite
file (WAL) bounded by the same bytes, which a restarted app opens again with the feed cursor
it had followed to. Not thread-safe on its own: ``LocalTier`` holds its lock around every call."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

logger = logging.getLogger("teamcache.local")

#: Bytes a record costs beyond its body and key (the record, the dictionary slot).
RECORD_OVERHEAD = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    namespace TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, etag TEXT, body BLOB NOT NULL,
    content_type TEXT NOT NULL, metadata TEXT, expires_at REAL NOT NULL, updated_at REAL NOT NULL,
    swr INTEGER NOT NULL, size INTEGER NOT NULL, used_at REAL NOT NULL,
    PRIMARY KEY (namespace, key));
CREATE INDEX IF NOT EXISTS entries_used ON entries (used_at);
CREATE TABLE IF NOT EXISTS feeds (namespace TEXT PRIMARY KEY, cursor TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    payload TEXT NOT NULL, base_etag TEXT, written_at REAL NOT NULL, size INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class Record:
    """One local copy: a raw entry's body (``kind`` ``raw``) or a descriptor's answer
    (``lookup``: ``body`` is the response's UTF-8, ``metadata`` its metadata). Times are this
    machine's wall clock (they outlive the process), derived from the service's ``ttl``."""

    kind: str
    etag: str | None
    body: bytes
    content_type: str
    metadata: dict[str, Any] | None
    expires_at: float
    updated_at: float
    swr: int = 0

    def text(self) -> str:
        """The body as text (a descriptor's answer), decoded once per copy, not per hit."""
        decoded = self.__dict__.get("_text")
        if decoded is None:
            decoded = self.body.decode()
            object.__setattr__(self, "_text", decoded)
        return decoded

    def answered(self, now: float, stale: bool) -> object | None:
        """The answer made from this copy within the same whole second (see ``remember``)."""
        made = self.__dict__.get("_answer")
        return made[2] if made is not None and made[0] == int(now) and made[1] == stale else None

    def remember(self, now: float, stale: bool, answer: object) -> None:
        object.__setattr__(self, "_answer", (int(now), stale, answer))

    def size(self, key: str) -> int:
        metadata = len(json.dumps(self.metadata)) if self.metadata is not None else 0
        return len(self.body) + len(key) + metadata + RECORD_OVERHEAD

    def fresh(self, now: float) -> bool:
        return now < self.expires_at

    def servable(self, now: float, max_stale: int | None) -> bool:
        """Within ``max_stale`` seconds past expiry, or the entry's own window."""
        return now < self.expires_at + max(max_stale or 0, self.swr)


@dataclass
class Queued:
    """A write made while the service could not be reached, waiting in the outbox."""

    id: int
    namespace: str
    kind: str
    key: str
    payload: dict[str, Any]
    base_etag: str | None
    written_at: float
    size: int


class Copies:
    """The records, by (namespace, key): memory first, then the file."""

    def __init__(self, path: str | os.PathLike[str] | None, max_bytes: int):
        self.max_bytes = max_bytes
        self.memory: OrderedDict[tuple[str, str], tuple[Record, int]] = OrderedDict()
        self.memory_bytes = 0
        self.db: sqlite3.Connection | None = None
        self.disk_bytes = 0
        self._lock_file: int | None = None
        self._path = os.fspath(path) if path is not None else None
        #: The outbox was read into memory: from then on memory holds every write not sent.
        self._outbox_loaded = False
        if path is not None and self._own(os.fspath(path)):
            self.db = sqlite3.connect(os.fspath(path), check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
            self.disk_bytes = self._stored_bytes(self.db)

    @property
    def bytes(self) -> int:
        """What the copies hold: the larger of memory's and the file's (each is bounded)."""
        return max(self.memory_bytes, self.disk_bytes)

    def get(self, namespace: str, key: str) -> Record | None:
        held = self.memory.get((namespace, key))
        if held is not None:
            self.memory.move_to_end((namespace, key))
            return held[0]
        if self.db is None:
            return None
        row = self._safely(lambda db: db.execute(
            "SELECT kind, etag, body, content_type, metadata, expires_at, updated_at, swr "
            "FROM entries WHERE namespace = ? AND key = ?", (namespace, key)).fetchone())
        if row is None or self.db is None:
            return None
        record = Record(kind=row[0], etag=row[1], body=bytes(row[2]), content_type=row[3],
                        metadata=json.loads(row[4]) if row[4] is not None else None, expires_at=row[5],
                        updated_at=row[6], swr=row[7])
        # Used again: kept in memory, and its place in the file's LRU moves (a write on a
        # memory miss only, never on a memory hit).
        self._safely(lambda db: db.execute("UPDATE entries SET used_at = ? WHERE namespace = ? AND key = ?",
                                           (time.time(), namespace, key)))
        self._remember(namespace, key, record)
        return record

    def put(self, namespace: str, key: str, record: Record) -> bool:
        """Keeps ``record`` (False when it is too large to keep: over an eighth of the bound)."""
        size = record.size(key)
        self.drop(namespace, key)
        if size > self.max_bytes // 8:
            return False
        self._remember(namespace, key, record)
        def write(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (namespace, key, record.kind, record.etag, record.body, record.content_type,
                        json.dumps(record.metadata) if record.metadata is not None else None,
                        record.expires_at, record.updated_at, record.swr, size, time.time()))
            self.disk_bytes += size
            self._trim_disk(db)
        self._safely(write)
        return True

    def extend(self, namespace: str, key: str, ttl: int) -> Record | None:
        """A revalidated copy: fresh for ``ttl`` more seconds."""
        record = self.get(namespace, key)
        if record is None:
            return None
        renewed = replace(record, expires_at=time.time() + ttl)
        self.put(namespace, key, renewed)
        return renewed

    def peek(self, namespace: str, key: str) -> Record | None:
        """The copy's version and expiry, without using it (a change being applied must not
        pull a row off the disk, nor move it in the LRU): body and metadata left empty when it
        is only on disk."""
        held = self.memory.get((namespace, key))
        if held is not None:
            return held[0]
        if self.db is None:
            return None
        row = self._safely(lambda db: db.execute("SELECT kind, etag, expires_at FROM entries WHERE namespace = ? "
                                                 "AND key = ?", (namespace, key)).fetchone())
        return Record(kind=row[0], etag=row[1], body=b"", content_type="", metadata=None, expires_at=row[2],
                      updated_at=0.0) if row else None

    def drop(self, namespace: str, key: str) -> None:
        held = self.memory.pop((namespace, key), None)
        if held is not None:
            self.memory_bytes -= held[1]
        if self.db is not None:
            # A SELECT then a DELETE, not DELETE … RETURNING: that needs SQLite 3.35 (Debian 11
            # and Ubuntu 20.04 ship older).
            def delete(db: sqlite3.Connection) -> None:
                row = db.execute("SELECT size FROM entries WHERE namespace = ? AND key = ?",
                                 (namespace, key)).fetchone()
                if row is not None:
                    db.execute("DELETE FROM entries WHERE namespace = ? AND key = ?", (namespace, key))
                    self.disk_bytes -= max(0, min(int(row[0]), self.max_bytes))
            self._safely(delete)

    def _safely(self, work: Any) -> Any:
        """Runs ``work`` on the file; a file that fails (full disk, read-only, locked by another
        process, corrupt) is given up for memory alone, logged once: it never fails a caller."""
        if self.db is None:
            return None
        try:
            return work(self.db)
        except sqlite3.Error:
            logger.exception("the local tier's file failed: going on in memory only")
            with contextlib.suppress(sqlite3.Error):
                self.db.close()
            self.db = None
            self.disk_bytes = 0
            self._set_aside()
            return None

    def _set_aside(self) -> None:
        """Removes a file given up (best effort): its outbox rows can no longer be deleted as
        they are sent, and a restart would send them again (a key deleted since would come
        back). Memory holds every write not sent; kept when the outbox was never read."""
        if self._path is None or not self._outbox_loaded:
            return
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.remove(self._path + suffix)

    def drop_namespace(self, namespace: str) -> None:
        for held in [name for name in self.memory if name[0] == namespace]:
            self.memory_bytes -= self.memory.pop(held)[1]
        def clear(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM entries WHERE namespace = ?", (namespace,))
            db.execute("DELETE FROM feeds WHERE namespace = ?", (namespace,))
            self.disk_bytes = self._stored_bytes(db)
        self._safely(clear)

    def holds(self, namespace: str) -> bool:
        if any(name[0] == namespace for name in self.memory):
            return True
        return self.db is not None and self.db.execute(
            "SELECT 1 FROM entries WHERE namespace = ? LIMIT 1", (namespace,)).fetchone() is not None

    def _remember(self, namespace: str, key: str, record: Record) -> None:
        size = record.size(key)
        old = self.memory.pop((namespace, key), None)
        if old is not None:
            self.memory_bytes -= old[1]
        self.memory[(namespace, key)] = (record, size)
        self.memory_bytes += size
        while self.memory_bytes > self.max_bytes and self.memory:
            _, (_, dropped) = self.memory.popitem(last=False)
            self.memory_bytes -= dropped

    def _stored_bytes(self, db: sqlite3.Connection) -> int:
        """The file's copies' sizes summed, each bounded as the tier writes them (0 to the
        budget) and summed by ``total`` (a float), so a file holding sizes no tier wrote (another
        client's bug, a corruption) cannot raise SQLite's integer overflow at open, as Swift's
        tier reads them."""
        row = db.execute("SELECT total(max(0, min(size, ?))) FROM entries", (self.max_bytes,)).fetchone()
        return int(row[0])

    def _trim_disk(self, db: sqlite3.Connection) -> None:
        while self.disk_bytes > self.max_bytes:
            rows = db.execute("SELECT rowid, max(0, min(size, ?)) FROM entries ORDER BY used_at LIMIT 64",
                              (self.max_bytes,)).fetchall()
            if not rows:
                self.disk_bytes = 0
                return
            # The oldest only until the excess is covered: a whole batch would take the copy just
            # written too whenever the file holds fewer than 64 rows.
            taken, excess = [], self.disk_bytes - self.max_bytes
            for rowid, size in rows:
                taken.append((rowid,))
                excess -= int(size)
                self.disk_bytes -= int(size)
                if excess <= 0:
                    break
            db.executemany("DELETE FROM entries WHERE rowid = ?", taken)

    # The feed cursors and the outbox (persistent with a file, else in memory).

    def cursor(self, namespace: str) -> str | None:
        row = self._safely(lambda db: db.execute("SELECT cursor FROM feeds WHERE namespace = ?",
                                                 (namespace,)).fetchone())
        return str(row[0]) if row is not None else None

    def save_cursor(self, namespace: str, cursor: str) -> None:
        self._safely(lambda db: db.execute("INSERT OR REPLACE INTO feeds VALUES (?, ?)", (namespace, cursor)))

    def load_outbox(self) -> list[Queued]:
        rows = self._safely(lambda db: db.execute(
            "SELECT id, namespace, kind, key, payload, base_etag, written_at, size FROM outbox ORDER BY id").fetchall())
        if rows is None:
            return []
        self._outbox_loaded = True
        # A key's earlier rows left beside its last (an earlier version replaced them in two
        # steps): the last carries the base they were made over, and sent first they would win.
        last = {(row[1], row[3]): row[0] for row in rows}
        stale = [(row[0],) for row in rows if last[(row[1], row[3])] != row[0]]
        if stale:
            self._safely(lambda db: db.executemany("DELETE FROM outbox WHERE id = ?", stale))
        return [Queued(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], row[6], row[7]) for row in rows
                if last[(row[1], row[3])] == row[0]]

    def queue(self, item: Queued, replacing: Queued | None = None) -> Queued:
        """Writes ``item``'s row, and deletes ``replacing``'s (the key's earlier write) in the same
        transaction: a crash leaves one of the two, never both (sent in order, the earlier would
        win and the later be reported superseded) and never neither."""
        payload = json.dumps(item.payload, allow_nan=False)

        def write(db: sqlite3.Connection) -> sqlite3.Cursor:
            try:
                db.execute("BEGIN IMMEDIATE")
                cursor = db.execute(
                    "INSERT INTO outbox (namespace, kind, key, payload, base_etag, written_at, size) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (item.namespace, item.kind, item.key, payload, item.base_etag, item.written_at, item.size))
                if replacing is not None:
                    db.execute("DELETE FROM outbox WHERE id = ?", (replacing.id,))
                db.execute("COMMIT")
            except BaseException:
                # Whatever stopped it (an interrupt too): never a transaction left open, which
                # every later statement of the file would join uncommitted; and what stopped it
                # is what is raised (a rollback that fails too must not replace it).
                with contextlib.suppress(sqlite3.Error):
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                raise
            return cursor
        cursor = self._safely(write)
        if cursor is not None:
            item.id = int(cursor.lastrowid or 0)
        return item

    def unqueue(self, item: Queued) -> None:
        self._safely(lambda db: db.execute("DELETE FROM outbox WHERE id = ?", (item.id,)))

    #: How long a tier waits for its file's lock before keeping its copies in memory.
    lock_patience = 0.5

    def _own(self, path: str) -> bool:
        """Takes the file for this tier alone (an exclusive lock on ``PATH-lock``, which the
        Swift client takes too): two tiers on one file would each send its outbox, twice. A
        file held elsewhere leaves this tier in memory (logged). Asked again for up to
        ``lock_patience``: a lock a closed tier let go may still be held a moment by a child
        process being started (between its fork and its exec it holds a copy of every
        descriptor, and the lock goes only with the last copy)."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows): one process per file is the caller's to keep
            return True
        descriptor = os.open(path + "-lock", os.O_RDWR | os.O_CREAT, 0o600)
        give_up = time.monotonic() + self.lock_patience
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < give_up:
                    time.sleep(0.01)
                    continue
                os.close(descriptor)
                logger.warning("local tier file %s is held by another tier (process): this one keeps copies in "
                               "memory", path)
                return False
            except OSError:
                os.close(descriptor)
                logger.warning("local tier file %s could not be locked: this one keeps copies in memory", path)
                return False
        self._lock_file = descriptor
        return True

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
        if self._lock_file is not None:
            os.close(self._lock_file)  # the lock goes with it
            self._lock_file = None


def window(value: Any) -> int:
    """A write's stale-while-revalidate window as a copy keeps it: whole seconds, 0 when none
    (None, negative, or not a number; the service refuses such a write anyway)."""
    try:
        return max(0, int(value)) if value is not None else 0
    except (TypeError, ValueError, OverflowError):
        return 0


def instant(text: Any) -> float | None:
    """The instant an ISO 8601 time names (None: not one)."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
