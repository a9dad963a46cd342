"""A service process's endless responses (open pages' event streams), ended together when the server is told to
stop: uvicorn's graceful shutdown waits for every response to end, and an open page's never would. The page's
EventSource reconnects, to another process.
"""

import asyncio
import signal
import threading
from types import FrameType
from typing import Any

import anyio


class Draining:
    """The process's endless streams, ended together when the server is told to stop (SIGTERM or SIGINT, the
    signals on which uvicorn shuts down gracefully)."""

    def __init__(self) -> None:
        self.started = False
        self._streams: set[anyio.CancelScope] = set()

    def install(self) -> None:
        """Chain to the handlers of the signals that stop the server (uvicorn's, set before the app starts). In
        the main thread only (Python's rule): an app run in a test client's thread is never signalled."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)

            def stopping(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
                loop.call_soon_threadsafe(self.drain)
                if callable(previous):
                    previous(signum, frame)

            signal.signal(sig, stopping)

    def drain(self) -> None:
        self.started = True
        for stream in list(self._streams):
            stream.cancel()

    def hold(self, stream: anyio.CancelScope) -> None:
        if self.started:
            stream.cancel()
        self._streams.add(stream)

    def release(self, stream: anyio.CancelScope) -> None:
        self._streams.discard(stream)

    def __len__(self) -> int:
        """The endless streams open now: pupils' open pages and teachers' live feeds."""
        return len(self._streams)
