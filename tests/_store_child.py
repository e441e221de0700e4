"""A child process for the SQLite store tests (not a test module): ``python _store_child.py MODE``.

``probe PATH``
    Open the store at PATH and write one session; print one JSON line: ``{"ok": true}`` or
    ``{"error": "<class name>", "message": "<text>"}`` for a greenroom error. Anything else
    escapes as a traceback on stderr, which the tests treat as a failure. Run as root, it
    first gives up the capabilities that let root ignore file modes (see below).
``hold PATH``
    Open the store, print ``ready <pid>`` and keep it open until stdin reaches end of file.
``append PATH PRODUCERS LIMIT``
    Open the store, add a session (``session <id>``), then run PRODUCERS concurrent tasks that
    each add up to LIMIT messages, printing ``<message id> <content>`` once each is
    acknowledged. Stops on its own after PRODUCERS * LIMIT messages.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

import trio

from greenroom.domain import Message, Session
from greenroom.errors import GreenroomError
from greenroom.persistence import SqliteStore, open_sqlite_store

# Capabilities that let root write, search or chmod regardless of file modes.
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_FOWNER = 1, 2, 3
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_file_mode_overrides() -> None:
    """Make file modes bind this process although it is root: it stays uid 0 (so it can still
    read the interpreter under /root and owns the test files) but loses CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH and CAP_FOWNER, so a 0o444 file or 0o555 directory stops it as it
    would stop any user. Done before any thread starts: threads inherit the reduced set."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    mask = ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH) | (1 << _CAP_FOWNER))
    data[0].effective &= mask
    data[0].permitted &= mask
    data[0].inheritable &= mask
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


async def probe(path: str) -> None:
    try:
        async with open_sqlite_store(path) as store:
            await store.add_session(Session.new(title="probe"))
    except GreenroomError as exc:
        print(json.dumps({"error": type(exc).__name__, "message": exc.message}), flush=True)
    else:
        print(json.dumps({"ok": True}), flush=True)


async def hold(path: str) -> None:
    async with open_sqlite_store(path):
        print(f"ready {os.getpid()}", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)


async def append(path: str, producers: int, limit: int) -> None:
    async def produce(store: SqliteStore, session_id: str, producer: int) -> None:
        for n in range(limit):
            content = f"p{producer}-{n}"
            message_id = await store.add_message(session_id, Message.user(content))
            print(message_id, content, flush=True)

    async with open_sqlite_store(path) as store:
        session = await store.add_session(Session.new(title="durability"))
        print("session", session.id, flush=True)
        async with trio.open_nursery() as nursery:
            for producer in range(producers):
                nursery.start_soon(produce, store, session.id, producer)


def main(argv: list[str]) -> None:
    mode, path, *rest = argv
    if mode == "probe":
        if os.geteuid() == 0:
            drop_file_mode_overrides()
        trio.run(probe, path)
    elif mode == "hold":
        trio.run(hold, path)
    elif mode == "append":
        trio.run(append, path, int(rest[0]), int(rest[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
