"""The query of ``/containerLogs/{namespace}/{pod}/{container}`` (a v1 ``PodLogOptions``).

The API server turns ``kubectl logs`` flags into these query parameters and
forwards them; the kubelet decodes them with the same rules as upstream's
parameter codec (booleans are anything but "false"/"0"..., integers must
parse, ``sinceTime`` is RFC 3339) and validates them as the API does. A query
that does not decode is 400 ``{"message": "Unable to decode query."}``, one
that decodes but is invalid is 422 ``{"message": "Invalid request."}``, as
upstream answers; the reason is logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pykubelet.util import klog

DECODE_ERROR: Final = '{"message": "Unable to decode query."}'
INVALID_ERROR: Final = '{"message": "Invalid request."}'

STREAM_ALL: Final = "All"
STREAM_STDOUT: Final = "Stdout"
STREAM_STDERR: Final = "Stderr"

_FALSE_WORDS: Final = frozenset({"0", "f", "false", "n", "no", "off"})


class LogQueryError(ValueError):
    """A bad query; ``status`` and ``body`` are what the client gets."""

    def __init__(self, status: int, body: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.body = body


@dataclass(frozen=True)
class PodLogOptions:
    container: str = ""
    follow: bool = False
    previous: bool = False
    since_seconds: int | None = None
    since_time: datetime | None = None
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    insecure_skip_tls_verify_backend: bool = False
    stream: str | None = None


def _bool(values: Sequence[str]) -> bool:
    return bool(values) and values[0].lower() not in _FALSE_WORDS


def _int(name: str, values: Sequence[str]) -> int | None:
    if not values:
        return None
    try:
        return int(values[0], 10)
    except ValueError:
        raise ValueError(f"{name}: {values[0]!r} is not an integer") from None


def _time(values: Sequence[str]) -> datetime | None:
    if not values or not values[0]:
        return None
    text = values[0]
    parsed = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        moment = datetime.fromisoformat(parsed)
    except ValueError:
        raise ValueError(f"sinceTime: {text!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None or "T" not in text.upper():
        raise ValueError(f"sinceTime: {text!r} is not an RFC 3339 time")
    return moment


def decode_pod_log_options(query: Mapping[str, Sequence[str]],
                           split_streams_enabled: bool = False) -> PodLogOptions:
    """Decode and validate; ``LogQueryError`` carries upstream's status and body."""
    params = {key: list(values) for key, values in query.items()}
    # "tail" is the old spelling of tailLines; "all" means no limit.
    tail = params.get("tail")
    if tail:
        if tail[0] == "all":
            params.pop("tailLines", None)
        else:
            params["tailLines"] = [tail[0]]
    try:
        options = PodLogOptions(
            container=(params.get("container") or [""])[0],
            follow=_bool(params.get("follow", [])),
            previous=_bool(params.get("previous", [])),
            since_seconds=_int("sinceSeconds", params.get("sinceSeconds", [])),
            since_time=_time(params.get("sinceTime", [])),
            timestamps=_bool(params.get("timestamps", [])),
            tail_lines=_int("tailLines", params.get("tailLines", [])),
            limit_bytes=_int("limitBytes", params.get("limitBytes", [])),
            insecure_skip_tls_verify_backend=_bool(
                params.get("insecureSkipTLSVerifyBackend", [])),
            stream=params["stream"][0] if params.get("stream") else None,
        )
    except ValueError as err:
        raise LogQueryError(400, DECODE_ERROR, str(err)) from None

    problems: list[str] = []
    if options.tail_lines is not None and options.tail_lines < 0:
        problems.append("tailLines: must be greater than or equal to 0")
    if options.limit_bytes is not None and options.limit_bytes < 1:
        problems.append("limitBytes: must be greater than 0")
    if options.since_seconds is not None and options.since_time is not None:
        problems.append("at most one of `sinceTime` or `sinceSeconds` may be specified")
    if options.since_seconds is not None and options.since_seconds < 1:
        problems.append("sinceSeconds: must be greater than 0")
    if split_streams_enabled and options.stream is not None:
        if options.stream not in (STREAM_ALL, STREAM_STDOUT, STREAM_STDERR):
            problems.append(f"stream: Unsupported value: {options.stream!r}")
        elif options.stream != STREAM_ALL and options.tail_lines is not None:
            problems.append("tailLines and specific stream are mutually exclusive for now")
    if problems:
        raise LogQueryError(422, INVALID_ERROR, "; ".join(problems))
    return options


def wanted_streams(options: PodLogOptions,
                   split_streams_enabled: bool) -> tuple[bool, bool]:
    """(stdout, stderr) to send; ``LogQueryError`` for a stream this kubelet cannot split."""
    stream = options.stream
    if split_streams_enabled:
        stream = stream or STREAM_ALL
        return stream in (STREAM_ALL, STREAM_STDOUT), stream in (STREAM_ALL, STREAM_STDERR)
    if stream is not None and stream != STREAM_ALL:
        message = (f'unable to return the given log stream: "{stream}". Please enable '
                   f"PodLogsQuerySplitStreams feature gate in kubelet")
        raise LogQueryError(400, message, message)
    return True, True


def log_query_rejected(err: LogQueryError) -> None:
    klog.v(3).info("Rejected container logs query", status=err.status, reason=str(err))


__all__ = [
    "LogQueryError",
    "PodLogOptions",
    "decode_pod_log_options",
    "wanted_streams",
]
