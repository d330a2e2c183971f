"""User-style SessionStore factories for ``--store module:factory``: any object with the SDK protocol
will do. ``make`` gives a SQLite store whose file is where FLOWER_TEST_STORE says; ``plain`` a store
that declares nothing to flower (see tests/test_store_contract.py)."""

import json
import os

import flower


def make():
    return flower.SqliteSessionStore(os.environ["FLOWER_TEST_STORE"])


def broken():
    return object()


class PlainStore:
    """A user's store as the SDK's protocol asks for it and no more: entries kept as JSON text in
    memory, ``append``/``load`` and three of the optional methods (no summaries); it declares nothing
    to flower, which must then treat it as a plain SDK store."""

    def __init__(self):
        self.rows: dict[tuple, list[str]] = {}
        self.uuids: dict[tuple, set] = {}
        self.mtimes: dict[tuple, int] = {}
        self.closed = 0

    @staticmethod
    def _key(key):
        return key["project_key"], key["session_id"], key.get("subpath") or ""

    async def append(self, key, entries):
        if not entries:
            return
        k = self._key(key)
        rows, seen = self.rows.setdefault(k, []), self.uuids.setdefault(k, set())
        for entry in entries:
            uid = entry.get("uuid")
            if isinstance(uid, str):
                if uid in seen:
                    continue
                seen.add(uid)
            rows.append(json.dumps(entry))
        import time
        self.mtimes[k] = max(int(time.time() * 1000), max(self.mtimes.values(), default=0) + 1)

    async def load(self, key):
        rows = self.rows.get(self._key(key))
        return None if rows is None else [json.loads(row) for row in rows]

    async def list_sessions(self, project_key):
        return [{"session_id": sid, "mtime": m} for (pk, sid, sub), m in self.mtimes.items()
                if pk == project_key and not sub]

    async def delete(self, key):
        pk, sid, sub = self._key(key)
        for k in [k for k in self.rows if k[:2] == (pk, sid) and (k[2] == sub or not sub)]:
            del self.rows[k], self.uuids[k], self.mtimes[k]

    async def list_subkeys(self, key):
        return [sub for (pk, sid, sub) in self.rows if (pk, sid) == (key["project_key"], key["session_id"]) and sub]

    def close(self):
        self.closed += 1


def plain():
    return PlainStore()
