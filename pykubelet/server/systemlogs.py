"""``/logs/``: the node's log directory over HTTP (upstream ``ServeLogs``).

``kubectl get --raw /api/v1/nodes/<node>/proxy/logs/`` lists ``/var/log`` and
fetches files from it, as Go's ``http.FileServer`` serves them: a directory
listing as a small HTML page, files with their content type (and byte
ranges), ``dir`` redirected to ``dir/``.

Only what lies inside the directory is served. A path with a ``..`` segment
is refused (400 ``invalid URL path``), and so is anything that resolves
outside the directory through a symbolic link (404), so a request can never
read, say, ``/etc/shadow``.
"""

from __future__ import annotations

import html
import os
import urllib.parse
from typing import Final

from aiohttp import web

from pykubelet.server.plaintext import plain_text

DEFAULT_NODE_LOG_DIR: Final = "/var/log"


def _contains_dot_dot(path: str) -> bool:
    return any(part == ".." for part in path.replace("\\", "/").split("/"))


def resolve_log_path(root: str, relative: str) -> str | None:
    """The real path of ``relative`` under ``root``, or None when it would escape ``root``."""
    real_root = os.path.realpath(root)
    candidate = os.path.realpath(os.path.join(real_root, relative.lstrip("/")))
    if candidate != real_root and not candidate.startswith(real_root + os.sep):
        return None
    return candidate


def _listing(directory: str) -> str:
    entries = []
    with os.scandir(directory) as it:
        for entry in sorted(it, key=lambda e: e.name):
            name = entry.name + ("/" if entry.is_dir() else "")
            href = urllib.parse.quote(name)
            entries.append(f'<a href="{html.escape(href)}">{html.escape(name)}</a>')
    return ('<!doctype html>\n<meta name="viewport" content="width=device-width">\n<pre>\n'
            + "".join(line + "\n" for line in entries) + "</pre>\n")


def system_log_handler(root: str = DEFAULT_NODE_LOG_DIR) -> web.RouteDef:
    """``GET /logs/{path}``, serving files under ``root``."""

    async def serve(request: web.Request) -> web.StreamResponse:
        raw = request.match_info.get("logpath", "")
        if "\x00" in raw or _contains_dot_dot(request.raw_path.split("?", 1)[0]) \
                or _contains_dot_dot(raw):
            return plain_text(400, "invalid URL path\n")
        path = resolve_log_path(root, raw)
        if path is None or not os.path.exists(path):
            return plain_text(404, "404 page not found\n")
        if os.path.isdir(path):
            if raw and not raw.endswith("/"):
                location = urllib.parse.quote(os.path.basename(raw.rstrip("/"))) + "/"
                raise web.HTTPMovedPermanently(location=location)
            index = os.path.join(path, "index.html")
            if os.path.isfile(index):
                return web.FileResponse(index)
            try:
                body = _listing(path)
            except OSError as err:
                return plain_text(500, f"Error reading directory: {err.strerror}\n")
            return web.Response(text=body, content_type="text/html", charset="utf-8")
        if raw.endswith("/"):
            raise web.HTTPMovedPermanently(
                location="../" + urllib.parse.quote(os.path.basename(raw.rstrip("/"))))
        if not os.access(path, os.R_OK):
            return plain_text(403, "403 Forbidden\n")
        return web.FileResponse(path)

    return web.get("/logs/{logpath:.*}", serve)


__all__ = ["DEFAULT_NODE_LOG_DIR", "resolve_log_path", "system_log_handler"]
