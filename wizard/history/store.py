"""The run history: one SQLite file under the user's data dir, safe with concurrent launches and crashes.

Why SQLite and these settings: WAL lets a dashboard read while a launch writes; ``BEGIN IMMEDIATE`` plus a busy
timeout serialises concurrent writers instead of failing them; ``synchronous=FULL`` makes a committed record survive
a crash of the process or the machine. A launch writes its record when it starts (outcome ``running``) and updates it
when it ends, so a killed launch still leaves its record (shown as ``running`` until someone marks it ``lost``).

The schema version lives in ``PRAGMA user_version``; a file from a newer dswiz is refused with a message rather than
misread.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from wizard.errors import DswizError
from wizard.history.record import Measurement

SCHEMA_VERSION = 1
# How long a process waits for another one's lock (the writes are short transactions).
BUSY_TIMEOUT_S = 30.0
EXPORT_FORMAT = "dswiz-history"
ENV_PATH = "DSWIZ_HISTORY"  # a path overrides the default location; "off" turns recording off

_DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    started_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT NOT NULL,
    source TEXT NOT NULL,
    hardware_key TEXT NOT NULL,
    family TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_hardware ON runs (hardware_key, family);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (started_at);
"""


def default_path() -> Path | None:
    """Where the history lives: ``$DSWIZ_HISTORY`` or the platform's user data dir; None when turned off."""
    env = os.environ.get(ENV_PATH, "").strip()
    if env.lower() in ("off", "0", "none", "no"):
        return None
    if env:
        return Path(env).expanduser()
    import platformdirs  # lazy: only commands that touch the history pay for it

    return Path(platformdirs.user_data_dir("dswiz", appauthor=False)) / "history.sqlite3"


@dataclass(frozen=True)
class ImportResult:
    added: int
    updated: int
    kept: int  # records we have already, as new as the file's copy or newer: ours stays
    unreadable: tuple[int, ...] = ()  # line numbers (1-based, the header is line 1) that are not run records

    def summary(self) -> str:
        return f"{self.added} added, {self.updated} updated, {self.kept} already here"


class HistoryStore:
    """Open with ``HistoryStore(path)``; every method opens its own short transaction (no long-lived handle)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise DswizError(
                f"the run history {self.path} is a folder, not a history file",
                f"point {ENV_PATH} at a file, e.g. {ENV_PATH}={self.path / 'history.sqlite3'} "
                f"({ENV_PATH}=off turns the history off)",
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            con = self._connect()
            try:
                version = con.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise DswizError(
                        f"the run history {self.path} was written by a newer dswiz (schema {version}, "
                        f"this one reads {SCHEMA_VERSION})",
                        "upgrade dswiz, or point DSWIZ_HISTORY at another file",
                    )
                if version < SCHEMA_VERSION:
                    # one process sets the schema up; the others wait for its lock, then find it done
                    con.execute("BEGIN IMMEDIATE")
                    if con.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                        for statement in filter(str.strip, _DDL.split(";")):
                            con.execute(statement)
                        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    con.execute("COMMIT")
            finally:
                con.close()
        except sqlite3.DatabaseError as e:
            raise self._unreadable(e) from None
        except OSError as e:
            raise DswizError(
                f"cannot open the run history {self.path}: {e.strerror or e}",
                f"make {self.path.parent} writable, or set {ENV_PATH} to another file ({ENV_PATH}=off turns "
                "the history off)",
            ) from None

    def _unreadable(self, e: Exception) -> DswizError:
        return DswizError(
            f"the run history {self.path} is not a readable SQLite file ({e})",
            f"move it aside (mv {self.path} {self.path}.broken) and dswiz starts a new one",
        )

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            # Switching a new file to WAL takes an exclusive lock, and SQLite answers "database is locked" at once
            # when another process holds one instead of waiting its busy timeout: wait here.
            deadline = time.monotonic() + BUSY_TIMEOUT_S
            while True:
                try:
                    con.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as e:
                    if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            con.execute("PRAGMA synchronous=FULL")
        except BaseException:
            con.close()
            raise
        return con

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        try:
            con = self._connect()
        except sqlite3.DatabaseError as e:
            raise self._unreadable(e) from None
        try:
            con.execute("BEGIN IMMEDIATE")
            yield con
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        finally:
            con.close()

    def put(self, record: Measurement) -> None:
        """Insert or replace the record with this id (a launch calls it at start and again at the end)."""
        with self._write() as con:
            _upsert(con, record)

    def get(self, run_id: str) -> Measurement | None:
        rows = self._select("SELECT record FROM runs WHERE id = ?", (run_id,))
        return rows[0] if rows else None

    def runs(self, *, hardware_key: str | None = None, limit: int | None = None) -> list[Measurement]:
        """Newest first."""
        sql = "SELECT record FROM runs"
        args: tuple[object, ...] = ()
        if hardware_key is not None:
            sql += " WHERE hardware_key = ?"
            args = (hardware_key,)
        sql += " ORDER BY started_at DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._select(sql, args)

    def _select(self, sql: str, args: tuple[object, ...]) -> list[Measurement]:
        try:
            con = self._connect()
            try:
                rows = con.execute(sql, args).fetchall()
            finally:
                con.close()
        except sqlite3.DatabaseError as e:
            raise self._unreadable(e) from None
        out = []
        for (text,) in rows:
            rec = _decode(text)
            if rec is not None:
                out.append(rec)
        return out

    # ------------------------------------------------------------------------------------------ export / import

    def export(self, path: Path) -> int:
        """Write every record as JSON lines after a header line; atomic (a temp file renamed into place)."""
        records = self.runs()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with tmp.open("w", encoding="utf-8") as f:
                f.write(json.dumps({"format": EXPORT_FORMAT, "schema": SCHEMA_VERSION}) + "\n")
                for r in records:
                    f.write(json.dumps(r.to_json(), sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise DswizError(f"cannot write {path}: {e.strerror or e}", "choose a writable path") from None
        return len(records)

    def import_lines(self, lines: Iterable[str], *, name: str = "the file") -> ImportResult:
        """Merge an export: new ids are added, a record ended later than ours replaces ours, the rest is kept."""
        it = iter(lines)
        header = _decode_json(next(it, ""))
        if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
            raise DswizError(
                f"{name} is not a dswiz history export (its first line must be the export header)",
                "make it with `dswiz history --export FILE`",
            )
        schema = header.get("schema")
        if not isinstance(schema, int) or isinstance(schema, bool) or schema > SCHEMA_VERSION:
            raise DswizError(
                f"{name} was exported by a newer dswiz (schema {schema!r})", "upgrade dswiz to import it"
            )
        added = updated = kept = 0
        unreadable: list[int] = []
        with self._write() as con:
            for number, line in enumerate(it, start=2):
                rec = Measurement.from_json(_decode_json(line)) if line.strip() else None
                if rec is None:
                    if line.strip():
                        unreadable.append(number)
                    continue
                row = con.execute("SELECT record FROM runs WHERE id = ?", (rec.id,)).fetchone()
                ours = _decode(row[0]) if row else None
                if ours is None:
                    added += 1
                elif (rec.ended_at or 0) > (ours.ended_at or 0):
                    updated += 1
                else:
                    kept += 1
                    continue
                _upsert(con, rec)
        return ImportResult(added, updated, kept, tuple(unreadable))


def _upsert(con: sqlite3.Connection, record: Measurement) -> None:
    con.execute(
        "INSERT OR REPLACE INTO runs (id, started_at, ended_at, outcome, source, hardware_key, family, record)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            record.id,
            record.started_at,
            record.ended_at,
            record.outcome,
            record.source,
            record.hardware.key,
            record.family,
            json.dumps(record.to_json(), sort_keys=True),
        ),
    )


def _decode_json(text: str) -> object:
    if len(text) > 1_000_000:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _decode(text: object) -> Measurement | None:
    return Measurement.from_json(_decode_json(text)) if isinstance(text, str) else None
