"""SPDY/3 framing details the runtime's streaming server depends on."""

from __future__ import annotations

import asyncio
import hashlib
import struct
import zlib

from pykubelet.server.spdy import (
    DICTIONARY,
    FLAG_FIN,
    PING,
    SYN_REPLY,
    SYN_STREAM,
    SpdySession,
    control_frame,
    data_frame,
    decode_header_block,
    encode_header_block,
)


def test_the_header_dictionary_is_the_draft_one() -> None:
    # 1423 bytes; the digest of the dictionary printed in the SPDY/3 draft, section 2.6.10.1.
    assert len(DICTIONARY) == 1423
    assert hashlib.sha256(DICTIONARY).hexdigest() == (
        "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02")


def test_header_blocks_round_trip_with_shared_contexts() -> None:
    deflate = zlib.compressobj(zdict=DICTIONARY)
    inflate = zlib.decompressobj(zdict=DICTIONARY)
    first = encode_header_block({"streamType": "stdout"}, deflate)
    second = encode_header_block({"streamType": "stderr", "port": "8080"}, deflate)
    assert decode_header_block(first, inflate) == {"streamtype": "stdout"}
    assert decode_header_block(second, inflate) == {"streamtype": "stderr", "port": "8080"}


def test_frame_layouts() -> None:
    assert control_frame(PING, 0, b"\x00\x00\x00\x07") == bytes.fromhex(
        "800300060000000400000007")
    assert data_frame(5, FLAG_FIN, b"ab") == bytes.fromhex("00000005010000026162")


async def test_session_opens_odd_streams_and_delivers_data() -> None:
    """A tiny in-process peer plays the runtime's side of one stream."""
    received: list[bytes] = []
    peer_done = asyncio.Event()

    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        inflate = zlib.decompressobj(zdict=DICTIONARY)
        deflate = zlib.compressobj(zdict=DICTIONARY)
        head = await reader.readexactly(8)
        assert struct.unpack(">HH", head[:4]) == (0x8003, SYN_STREAM)
        payload = await reader.readexactly(struct.unpack(">I", head[4:])[0] & 0xFFFFFF)
        stream_id = struct.unpack(">I", payload[:4])[0]
        assert decode_header_block(payload[10:], inflate) == {"streamtype": "stdin"}
        writer.write(control_frame(SYN_REPLY, 0, struct.pack(">I", stream_id)
                                   + encode_header_block({}, deflate)))
        writer.write(control_frame(PING, 0, b"\x00\x00\x00\x02"))
        writer.write(data_frame(stream_id, 0, b"from runtime"))
        writer.write(data_frame(stream_id, FLAG_FIN, b""))
        await writer.drain()
        # The client echoes the ping, then sends its data and FIN.
        while True:
            head = await reader.readexactly(8)
            length = struct.unpack(">I", head[4:])[0] & 0xFFFFFF
            body = await reader.readexactly(length)
            received.append(head + body)
            if head[0] == 0 and head[4] & FLAG_FIN:
                break
        writer.close()
        peer_done.set()

    server = await asyncio.start_server(peer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    session = SpdySession(reader, writer)
    session.start()
    stream = await session.open_stream({"streamType": "stdin"})
    assert stream.id == 1
    assert await asyncio.wait_for(stream.read(), 5) == b"from runtime"
    assert await asyncio.wait_for(stream.read(), 5) is None
    await stream.write(b"to runtime")
    await stream.close()
    await asyncio.wait_for(peer_done.wait(), 5)
    await session.close()
    server.close()
    await server.wait_closed()
    ping = control_frame(PING, 0, b"\x00\x00\x00\x02")
    assert received[0] == ping
    assert received[1] == data_frame(1, 0, b"to runtime")
    assert received[2] == data_frame(1, FLAG_FIN, b"")
