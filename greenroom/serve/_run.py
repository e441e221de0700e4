"""Running a server: in this process until a signal (``run``, what ``greenroom serve`` does), or
embedded on a thread of a program that is not a trio program (``serving_in_thread``, what
``greenroom chat`` does without a URL)."""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import partial

import trio

from greenroom.errors import GreenroomError

from ._config import ServeConfig
from ._server import serve


@contextmanager
def serving_in_thread(cfg: ServeConfig) -> Iterator[str]:
    """Run an embedded server on a thread with its own trio loop; yields its URL.

    For programs that are not trio programs (``greenroom chat`` runs on asyncio). Leaving the
    block cancels the server (streams end, sessions persist, the store closes) and joins the
    thread.

    Raises:
        GreenroomError: the server could not start (a configuration error, a locked database).
    """
    started: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.CancelScope] | BaseException]
    started = queue.Queue(maxsize=2)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, cfg, embedded=True))
            started.put((url, trio.lowlevel.current_trio_token(), nursery.cancel_scope))

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the waiting caller, or lost if it left
            with suppress(queue.Full):
                started.put_nowait(exc)

    thread = threading.Thread(target=thread_main, name="greenroom-server", daemon=True)
    thread.start()
    outcome = started.get()
    if isinstance(outcome, BaseException):
        thread.join()
        if isinstance(outcome, BaseExceptionGroup):
            found = outcome.subgroup(GreenroomError)
            if found is not None:
                raise found.exceptions[0] from outcome
        raise outcome
    url, token, scope = outcome
    try:
        yield url
    finally:
        with suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join()


def run(cfg: ServeConfig) -> int:
    """Run the server in this process; 0 after a clean shutdown, 2 for a configuration error."""
    failed = False
    try:
        trio.run(partial(serve, cfg))
    except* GreenroomError as group:
        failed = True
        for exc in group.exceptions:
            print(f"greenroom: {exc}", file=sys.stderr)
    return 2 if failed else 0
