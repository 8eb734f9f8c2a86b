"""An asyncio service on an event loop of its own, in a daemon thread: how the test servers (scripted, fault proxy,
replay judge) start beside the client in one process, and stop."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


class BackgroundLoop:
    """``start(up, down)``: runs ``up()`` on a new loop in a thread and returns once it is done (raising what it
    raised); the loop then runs until ``stop()``, which cancels what is left, runs ``down()`` and closes it."""

    def __init__(self, name: str):
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, up: Callable[[], Awaitable[None]], down: Callable[[], Awaitable[None]],
              timeout_s: float = 30.0) -> None:
        ready, err = threading.Event(), []

        def run() -> None:
            loop = self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(up())
            except BaseException as e:  # handed to the starting thread
                err.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(down())
            loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise TimeoutError(f"{self.name} did not start within {timeout_s:g} s")
        if err:
            raise err[0]

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.loop is not None and self._thread is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout_s)
        self._thread = None
