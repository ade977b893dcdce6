"""``bide serve``: one process that serves the HTTP API and keeps runs moving.

uvicorn serves the app (``serve_app``) on a thread of its own while a ``Watcher``
serves the same engine: decisions posted over HTTP go through the watcher's inbox
(so its workers resume the run at once) and submitted runs are offered to its
workers. The watcher keeps the main thread, so SIGINT/SIGTERM stop both as they
stop ``bide watch``: runs at their next boundary, then the HTTP server.

Starlette and uvicorn are the ``serve`` extra: imported only when a server starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..api.runtime import Engine
from ..base.errors import ServeError
from ..base.optional import load
from ..base.permissions import private_dir
from ..human.inbox import MAX_BYTES
from ..ops.watcher import Watcher
from .token import load_token

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765
GRACE = 5.0  # seconds uvicorn lets requests under way finish when stopping
TOKEN_FILE = "serve.token"  # in the home, unless --token-file names another


def token_path(engine: Engine, token_file: Path | None) -> Path:
    """Where the token is: ``token_file``, or ``<home>/serve.token`` (the home's directory
    made, owner-only, if a PostgreSQL home's local one is not there yet)."""
    if token_file is not None:
        return token_file
    return private_dir(engine.home) / TOKEN_FILE


class Server:
    """The HTTP API of ``engine`` on ``host:port`` (0: any free port), beside ``watcher``.

    ``start()`` serves HTTP on a thread and returns the URL; ``run()`` also serves
    the watcher in the calling thread until it stops, then stops HTTP; ``stop()``
    stops HTTP alone.
    """

    DEFAULT_HOST, DEFAULT_PORT = DEFAULT_HOST, DEFAULT_PORT

    def __init__(self, engine: Engine, *, watcher: Watcher | None = None,
                 token_file: Path | None = None, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, max_body: int = MAX_BYTES,
                 log: Callable[[str], None] = print, **app_options: Any) -> None:
        self.engine, self.watcher, self.host, self.port = engine, watcher, host, port
        self._serve_app, self._uvicorn_module = _imported()  # before any file is made
        self.token_file = token_path(engine, token_file)
        self.token = load_token(self.token_file)
        self.log = log
        self.max_body, self.app_options = max_body, app_options
        self._uvicorn: Any = None
        self._closing = threading.Event()  # set by stop(): open event streams end
        self._thread: threading.Thread | None = None
        self.url: str | None = None

    @staticmethod
    def check_extra() -> None:
        """Raise ServeError (saying ``pip install 'bide[serve]'``) if the extra is missing."""
        _imported()

    def app(self) -> Any:
        """The Starlette app (``serve_app.make_app``) wired to the watcher, if any."""
        watcher = self.watcher
        return self._serve_app.make_app(self.engine, self.token, max_body=self.max_body,
                        inbox=None if watcher is None else watcher.inbox,
                        offer=None if watcher is None else watcher.dispatcher.offer,
                        closing=self._closing, **self.app_options)

    def start(self, timeout: float = 30.0) -> str:
        """Serve HTTP on a thread; return its URL once the socket listens.

        Raises:
            ServeError: the extra is missing, or the server did not start in time
                (the port taken, say: uvicorn's own log says why).
        """
        uvicorn = self._uvicorn_module
        self._closing.clear()
        config = uvicorn.Config(self.app(), host=self.host, port=self.port, lifespan="off",
                                access_log=False, log_level="warning",
                                timeout_graceful_shutdown=GRACE)
        server = uvicorn.Server(config)
        self._uvicorn = server
        self._thread = threading.Thread(target=server.run, name="bide-serve-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServeError(f"{self.host}:{self.port}", "the HTTP server did not start "
                                 "(is the port taken? uvicorn's message above says why)")
            time.sleep(0.01)
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving HTTP (open event streams are closed)."""
        if self._uvicorn is None or self._thread is None:
            return
        self._closing.set()
        self._uvicorn.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():  # a stream that would not end: stop waiting for it
            self._uvicorn.force_exit = True
            self._thread.join(timeout)

    def run(self) -> None:
        """Serve HTTP and the watcher until SIGINT/SIGTERM (or the engine's ``stopping``)."""
        if self.watcher is None:
            raise ValueError("run() serves a watcher too: give Server(watcher=...)")
        url = self.start()
        self.log(f"serving {url} (token in {self.token_file})")
        try:
            self.watcher.serve()
        finally:
            self.stop()


def _imported() -> tuple[Any, Any]:
    """``serve_app`` and uvicorn, or a ServeError saying which extra to install."""
    try:
        uvicorn = load("uvicorn", "serve", "bide serve")
        load("starlette.applications", "serve", "bide serve")
    except ImportError as exc:
        raise ServeError("bide serve", f"needs Starlette and uvicorn ({exc.name} is not "
                         "installed)",
                         hint="pip install 'bide[serve]'") from None
    from . import app as serve_app

    return serve_app, uvicorn
