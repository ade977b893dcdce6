"""``bide serve``: the HTTP API (a Starlette app), its errors, events, OpenAPI
description, bearer token and approvals page, in one process with a watcher.
Starlette and uvicorn are imported only when it serves (the ``serve`` extra).

May import: ``ops``, ``api`` and everything below.
"""
