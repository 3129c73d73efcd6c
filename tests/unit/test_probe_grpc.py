"""gRPC probes against a real grpc.aio server running the standard health service."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pykubelet.container import ProbeResult
from pykubelet.probe.grpc import grpc_probe


@pytest.fixture
async def health_port() -> AsyncIterator[int]:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await servicer.set("db", health_pb2.HealthCheckResponse.SERVING)
    await servicer.set("cache", health_pb2.HealthCheckResponse.NOT_SERVING)
    try:
        yield port
    finally:
        await server.stop(None)


async def test_whole_server_serving(health_port: int) -> None:
    assert await grpc_probe("127.0.0.1", health_port, "", 1) == (ProbeResult.SUCCESS,
                                                                 "service healthy")


async def test_named_service_serving(health_port: int) -> None:
    result, _ = await grpc_probe("127.0.0.1", health_port, "db", 1)
    assert result is ProbeResult.SUCCESS


async def test_named_service_not_serving(health_port: int) -> None:
    assert await grpc_probe("127.0.0.1", health_port, "cache", 1) == (
        ProbeResult.FAILURE, 'service unhealthy (responded with "NOT_SERVING")')


async def test_unknown_service_fails_with_not_found(health_port: int) -> None:
    result, output = await grpc_probe("127.0.0.1", health_port, "nope", 1)
    assert result is ProbeResult.FAILURE
    assert output.startswith("error: health rpc probe failed: rpc error: code = NotFound")


async def test_server_without_health_service_says_so() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        result, output = await grpc_probe("127.0.0.1", port, "", 1)
    finally:
        await server.stop(None)
    assert result is ProbeResult.FAILURE
    assert output.startswith("error: this server does not implement the grpc health protocol")


async def test_nothing_listening_times_out_connecting() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    result, output = await grpc_probe("127.0.0.1", port, "", 0.5)
    assert result is ProbeResult.FAILURE
    assert output == (f'timeout: failed to connect service "127.0.0.1:{port}" within 500ms: '
                      "context deadline exceeded")
