"""klog-style structured logging.

The Go kubelet logs through klog: one line per event, a header with severity,
date, time, process id and source location, then a quoted message and
``key=value`` pairs. Operators grep and parse those lines, so pykubelet writes
the same shape::

    I1121 12:48:45.123456    4242 kubelet.py:88] "Starting kubelet" nodeName="n1"

Verbosity follows ``--v``: ``v(4).info(...)`` is written only with ``--v=4``
or more. Call ``info``/``warning``/``error`` with keyword pairs instead of
formatting values into the message, so that messages stay constant.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from typing import Any, TextIO

_LOGGER = logging.getLogger("pykubelet")
_SEVERITY = {logging.DEBUG: "I", logging.INFO: "I", logging.WARNING: "W", logging.ERROR: "E",
             logging.CRITICAL: "F"}
_verbosity = 0


def _quote(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, BaseException):
        value = str(value) or type(value).__name__
    if not isinstance(value, str):
        value = str(value)
    return json.dumps(value, ensure_ascii=False)


def format_pairs(msg: str, pairs: dict[str, Any]) -> str:
    parts = [_quote(msg)]
    parts.extend(f"{key}={_quote(value)}" for key, value in pairs.items())
    return " ".join(parts)


class _KlogFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        seconds = record.created
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(seconds))
        micros = int((seconds % 1) * 1_000_000)
        where = f"{os.path.basename(record.pathname)}:{record.lineno}"
        return (f"{_SEVERITY.get(record.levelno, 'I')}{stamp}.{micros:06d} "
                f"{record.process:>7} {where}] {record.getMessage()}")


def setup(verbosity: int = 0, stream: TextIO | None = None) -> None:
    """Route pykubelet's log lines to ``stream`` (stderr) at the given ``--v`` level."""
    global _verbosity
    _verbosity = verbosity
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_KlogFormatter())
    _LOGGER.handlers[:] = [handler]
    _LOGGER.setLevel(logging.DEBUG)
    _LOGGER.propagate = False


def verbosity() -> int:
    return _verbosity


def set_verbosity(level: int) -> None:
    """Change ``--v`` at run time (the kubelet's ``/debug/flags/v``)."""
    global _verbosity
    _verbosity = level


def _emit(level: int, msg: str, pairs: dict[str, Any], depth: int = 0) -> None:
    if _LOGGER.isEnabledFor(level):
        # stacklevel 3: skip _emit and the public helper, report the caller's line.
        _LOGGER.log(level, "%s", format_pairs(msg, pairs), stacklevel=3 + depth)


def info(msg: str, **pairs: Any) -> None:
    _emit(logging.INFO, msg, pairs)


def info_depth(depth: int, msg: str, **pairs: Any) -> None:
    """``info`` reporting the line ``depth`` frames above the caller (klog's ``InfoSDepth``).

    For helpers that log on behalf of their caller, so the header names the
    code that had something to say rather than the helper.
    """
    _emit(logging.INFO, msg, pairs, depth)


def warning(msg: str, **pairs: Any) -> None:
    _emit(logging.WARNING, msg, pairs)


def error(msg: str, err: BaseException | str | None = None, **pairs: Any) -> None:
    if err is not None:
        pairs = {"err": err, **pairs}
    _emit(logging.ERROR, msg, pairs)


def exception(msg: str, err: BaseException, **pairs: Any) -> None:
    """An error line followed by the traceback of ``err``: for crashes, not expected failures."""
    if not _LOGGER.isEnabledFor(logging.ERROR):
        return
    trace = "".join(traceback.format_exception(err)).rstrip("\n")
    _LOGGER.log(logging.ERROR, "%s\n%s", format_pairs(msg, {"err": err, **pairs}), trace,
                stacklevel=2)


class Verbose:
    """The result of ``v(level)``: logs only when ``--v`` is at least ``level``."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def info(self, msg: str, **pairs: Any) -> None:
        if self.enabled and _LOGGER.isEnabledFor(logging.DEBUG):
            _LOGGER.log(logging.DEBUG, "%s", format_pairs(msg, pairs), stacklevel=2)

    def info_depth(self, depth: int, msg: str, **pairs: Any) -> None:
        """``info`` naming the line ``depth`` frames above the caller (``V(n).InfoSDepth``)."""
        if self.enabled and _LOGGER.isEnabledFor(logging.DEBUG):
            _LOGGER.log(logging.DEBUG, "%s", format_pairs(msg, pairs), stacklevel=2 + depth)


def v(level: int) -> Verbose:
    return Verbose(_verbosity >= level)
