"""Plain-text answers of the kubelet API, written as Go's ``http.Error`` writes them.

Upstream answers errors, ``/healthz``, pprof and the node-log refusals with
``text/plain; charset=utf-8`` and ``X-Content-Type-Options: nosniff``, so a
browser never reads an error message or a log line as HTML. Every handler
here that answers in plain text does so through ``plain_text``; a streamed
plain-text answer adds ``NOSNIFF`` to its own headers.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

NOSNIFF: Final = {"X-Content-Type-Options": "nosniff"}


def plain_text(status: int, body: str) -> web.Response:
    """A ``text/plain; charset=utf-8`` answer with ``nosniff``."""
    return web.Response(status=status, text=body, content_type="text/plain", charset="utf-8",
                        headers=NOSNIFF)


__all__ = ["NOSNIFF", "plain_text"]
