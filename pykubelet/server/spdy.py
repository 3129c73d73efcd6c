"""A minimal SPDY/3.1 client session: what the kubelet needs to speak to the runtime's streams.

The runtime's streaming server (containerd's, like the Go kubelet's own
before it) multiplexes exec, attach and port-forward streams over SPDY/3.1,
the protocol Kubernetes has used for these since 2015. The kubelet is
normally only a proxy for such connections; it needs to *speak* SPDY only to
translate a WebSocket ``v5.channel.k8s.io`` client (which the runtime does not
understand) into the runtime's SPDY protocol, as upstream's stream translator
does.

Only the client side of what Kubernetes uses is implemented: ``SYN_STREAM``
(client streams, odd ids), ``SYN_REPLY``, ``DATA`` with ``FIN``,
``RST_STREAM``, ``PING`` (echoed), ``GOAWAY``; ``SETTINGS``, ``HEADERS`` and
``WINDOW_UPDATE`` are read and ignored, as Kubernetes' SPDY implementation
does not enforce flow control. Header blocks are zlib-compressed with one
context per direction, primed with the dictionary of the SPDY/3 draft
(section 2.6.10.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Mapping
from typing import Final

from pykubelet.util import klog

VERSION: Final = 3

SYN_STREAM: Final = 1
SYN_REPLY: Final = 2
RST_STREAM: Final = 3
SETTINGS: Final = 4
PING: Final = 6
GOAWAY: Final = 7
HEADERS: Final = 8
WINDOW_UPDATE: Final = 9

FLAG_FIN: Final = 0x01

RST_CANCEL: Final = 5
RST_REFUSED_STREAM: Final = 3

_MAX_FRAME: Final = 16 * 1024 * 1024
# Data frames are split at this size when written.
_DATA_CHUNK: Final = 32 * 1024
# Unread data buffered per stream before the whole session stops reading.
_STREAM_BUFFER: Final = 1024 * 1024

# The SPDY/3 header compression dictionary, as the draft defines it: 65
# length-prefixed header words, then a run of common values.
_DICTIONARY_WORDS: Final = (
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset",
    "accept-encoding", "accept-language", "accept-ranges", "age", "allow", "authorization",
    "cache-control", "connection", "content-base", "content-encoding", "content-language",
    "content-length", "content-location", "content-md5", "content-range", "content-type",
    "date", "etag", "expect", "expires", "from", "host", "if-match", "if-modified-since",
    "if-none-match", "if-range", "if-unmodified-since", "last-modified", "location",
    "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer",
    "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent",
    "vary", "via", "warning", "www-authenticate", "method", "get", "status", "200 OK",
    "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin",
)
_DICTIONARY_TAIL: Final = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY: Final = b"".join(struct.pack(">I", len(word)) + word.encode()
                             for word in _DICTIONARY_WORDS) + _DICTIONARY_TAIL.encode()


class SpdyError(Exception):
    """The SPDY session broke (malformed frame, reset stream, connection gone)."""


def encode_header_block(headers: Mapping[str, str], deflate: zlib._Compress) -> bytes:
    """A compressed name/value block; names are lower-cased as SPDY requires."""
    raw = struct.pack(">I", len(headers))
    for name, value in headers.items():
        name_bytes, value_bytes = name.lower().encode(), value.encode()
        raw += struct.pack(">I", len(name_bytes)) + name_bytes
        raw += struct.pack(">I", len(value_bytes)) + value_bytes
    return deflate.compress(raw) + deflate.flush(zlib.Z_SYNC_FLUSH)


def decode_header_block(block: bytes, inflate: zlib._Decompress) -> dict[str, str]:
    raw = inflate.decompress(block)
    try:
        (count,) = struct.unpack_from(">I", raw, 0)
        offset, headers = 4, {}
        for _ in range(count):
            (length,) = struct.unpack_from(">I", raw, offset)
            name = raw[offset + 4:offset + 4 + length].decode()
            offset += 4 + length
            (length,) = struct.unpack_from(">I", raw, offset)
            headers[name] = raw[offset + 4:offset + 4 + length].decode()
            offset += 4 + length
    except (struct.error, UnicodeDecodeError) as err:
        raise SpdyError(f"malformed SPDY header block: {err}") from err
    return headers


def control_frame(frame_type: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, frame_type,
                       (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload


class SpdyStream:
    """One client-initiated stream: bytes in (a queue) and out (``write``)."""

    def __init__(self, session: SpdySession, stream_id: int) -> None:
        self.session = session
        self.id = stream_id
        self.replied = asyncio.Event()
        self._data: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._buffered = 0
        self.remote_closed = False
        self.local_closed = False
        self.reset_code: int | None = None

    def _deliver(self, data: bytes, fin: bool) -> None:
        if data:
            self._data.put_nowait(data)
            self._buffered += len(data)
            if self._buffered > _STREAM_BUFFER:
                self.session._pause()
        if fin and not self.remote_closed:
            self.remote_closed = True
            self._data.put_nowait(None)

    def _reset(self, code: int) -> None:
        self.reset_code = code
        if not self.remote_closed:
            self.remote_closed = True
            self._data.put_nowait(None)

    async def read(self) -> bytes | None:
        """The next bytes the runtime sent; None once it closed (or reset) the stream."""
        data = await self._data.get()
        if data is not None:
            self._buffered -= len(data)
            if self._buffered <= _STREAM_BUFFER // 2:
                self.session._resume()
        return data

    async def write(self, data: bytes) -> None:
        for start in range(0, len(data), _DATA_CHUNK):
            await self.session._send(data_frame(self.id, 0, data[start:start + _DATA_CHUNK]))

    async def close(self) -> None:
        """Half-close: no more data from this side (``FIN``)."""
        if not self.local_closed:
            self.local_closed = True
            await self.session._send(data_frame(self.id, FLAG_FIN, b""))


class SpdySession:
    """A SPDY/3.1 client session on an upgraded connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._deflate = zlib.compressobj(zdict=DICTIONARY)
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._streams: dict[int, SpdyStream] = {}
        self._next_id = 1
        self._write_lock = asyncio.Lock()
        self._reader_task: asyncio.Task[None] | None = None
        self._paused = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self.closed = asyncio.Event()

    def start(self) -> None:
        self._reader_task = asyncio.ensure_future(self._read_frames())

    def _pause(self) -> None:
        self._resumed.clear()

    def _resume(self) -> None:
        if all(s._buffered <= _STREAM_BUFFER // 2 for s in self._streams.values()):
            self._resumed.set()

    async def _send(self, frame: bytes) -> None:
        if self.closed.is_set():
            raise SpdyError("SPDY session is closed")
        async with self._write_lock:
            self._writer.write(frame)
            await self._writer.drain()

    async def open_stream(self, headers: Mapping[str, str]) -> SpdyStream:
        """``SYN_STREAM`` a new bidirectional stream carrying ``headers``."""
        async with self._write_lock:
            stream = SpdyStream(self, self._next_id)
            self._next_id += 2
            self._streams[stream.id] = stream
            block = encode_header_block(headers, self._deflate)
            payload = struct.pack(">IIBB", stream.id, 0, 0, 0) + block
            self._writer.write(control_frame(SYN_STREAM, 0, payload))
            await self._writer.drain()
        return stream

    async def _read_frames(self) -> None:
        try:
            while True:
                await self._resumed.wait()
                head = await self._reader.readexactly(8)
                first, second = struct.unpack(">II", head)
                flags, length = second >> 24, second & 0xFFFFFF
                if length > _MAX_FRAME:
                    raise SpdyError(f"SPDY frame of {length} bytes is too large")
                payload = await self._reader.readexactly(length)
                if first & 0x80000000:
                    await self._control(first & 0xFFFF, flags, payload)
                else:
                    stream = self._streams.get(first & 0x7FFFFFFF)
                    if stream is not None:
                        stream._deliver(payload, bool(flags & FLAG_FIN))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except SpdyError as err:
            klog.error("SPDY session with the runtime failed", err)
        finally:
            self._shutdown()

    async def _control(self, frame_type: int, flags: int, payload: bytes) -> None:
        if frame_type == SYN_REPLY:
            (stream_id,) = struct.unpack_from(">I", payload)
            decode_header_block(payload[4:], self._inflate)
            stream = self._streams.get(stream_id & 0x7FFFFFFF)
            if stream is not None:
                stream.replied.set()
                if flags & FLAG_FIN:
                    stream._deliver(b"", True)
        elif frame_type == HEADERS:
            decode_header_block(payload[4:], self._inflate)
        elif frame_type == RST_STREAM:
            stream_id, code = struct.unpack_from(">II", payload)
            stream = self._streams.get(stream_id & 0x7FFFFFFF)
            if stream is not None:
                stream._reset(code)
        elif frame_type == PING:
            await self._send(control_frame(PING, 0, payload[:4]))
        elif frame_type == GOAWAY:
            raise asyncio.IncompleteReadError(b"", None)
        elif frame_type == SYN_STREAM:
            # The runtime never opens streams towards the kubelet; refuse politely.
            (stream_id,) = struct.unpack_from(">I", payload)
            decode_header_block(payload[10:], self._inflate)
            await self._send(control_frame(RST_STREAM, 0, struct.pack(
                ">II", stream_id & 0x7FFFFFFF, RST_REFUSED_STREAM)))
        # SETTINGS and WINDOW_UPDATE carry nothing this client acts on.

    def _shutdown(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        self._resumed.set()
        for stream in self._streams.values():
            stream._reset(RST_CANCEL)

    async def close(self) -> None:
        """Drop the connection (the runtime ends whatever the session was running)."""
        self._shutdown()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


__all__ = ["DICTIONARY", "SpdyError", "SpdySession", "SpdyStream"]
