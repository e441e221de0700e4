"""Session stores: the :class:`Store` contract, an in-memory store and an SQLite store."""

from ._protocol import Store as Store
from .memory import MemoryStore as MemoryStore, open_memory_store as open_memory_store
from .sqlite import SqliteStore as SqliteStore, open_sqlite_store as open_sqlite_store

__all__ = ["MemoryStore", "SqliteStore", "Store", "open_memory_store", "open_sqlite_store"]
