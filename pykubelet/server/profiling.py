"""``/debug/pprof/``: a CPU profile of the running kubelet (``enableProfilingHandler``).

The Go kubelet serves Go's pprof profiles here. pykubelet has no Go runtime
to profile, so the same paths give the Python equivalent: ``profile`` runs
``cProfile`` on the event loop's thread (where all of the kubelet's work
runs) for ``?seconds=`` (default 30) and answers with the hottest functions
as text, ``cmdline`` the process's command line. Go-only profiles (heap,
goroutine, block, mutex, trace) answer 404 naming what is available.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import sys
from typing import Final

from aiohttp import web

from pykubelet.server.plaintext import plain_text

PPROF_PATH: Final = "/debug/pprof/"
DEFAULT_SECONDS: Final = 30
MAX_SECONDS: Final = 300
_TOP_FUNCTIONS: Final = 80

_INDEX: Final = ("/debug/pprof/\n\n"
                 "profile  CPU profile of the kubelet's event loop thread (cProfile); "
                 "?seconds=N, default 30\n"
                 "cmdline  the command line of the kubelet process\n")


def profiling_routes() -> list[web.RouteDef]:
    busy = asyncio.Lock()

    async def handle(request: web.Request) -> web.Response:
        name = request.match_info.get("subpath", "")
        if name in ("", "index"):
            return plain_text(200, _INDEX)
        if name == "cmdline":
            return plain_text(200, "\x00".join(sys.argv))
        if name != "profile":
            return plain_text(404, f"Unknown profile: {name}\n\n{_INDEX}")
        try:
            seconds = int(request.query.get("seconds", DEFAULT_SECONDS))
        except ValueError:
            return plain_text(400, "Bad Request: invalid seconds\n")
        if not 0 < seconds <= MAX_SECONDS:
            return plain_text(400, f"Bad Request: seconds must be between 1 and {MAX_SECONDS}\n")
        if busy.locked():
            return plain_text(500, "Could not enable CPU profiling: profiling already in use\n")
        async with busy:
            profiler = cProfile.Profile()
            profiler.enable()
            try:
                await asyncio.sleep(seconds)
            finally:
                profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(_TOP_FUNCTIONS)
        return plain_text(200, out.getvalue())

    return [web.get(PPROF_PATH + "{subpath:.*}", handle)]


__all__ = ["PPROF_PATH", "profiling_routes"]
