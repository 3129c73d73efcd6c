"""The gRPC check (upstream ``pkg/probe/grpc``): the standard ``grpc.health.v1`` protocol.

The probe connects in plaintext (upstream supports no credentials), waits for
the connection within the probe's timeout, and calls ``Health/Check`` with
the probe's ``service`` (empty means the server as a whole). Only ``SERVING``
is healthy. Every way of not getting that answer (no connection, no health
service, unknown service, deadline) is an unhealthy verdict whose output
says which, in upstream's words, so users can tell a down server from a
missing ``grpc_health_probe`` registration.
"""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pykubelet.container import ProbeResult
from pykubelet.probe import go_duration, join_host_port, user_agent
from pykubelet.util import klog


def _go_code_name(code: grpc.StatusCode) -> str:
    # Go prints status codes in CamelCase ("NotFound"); messages keep that spelling.
    return "".join(part.capitalize() for part in code.name.split("_"))


def _serving_status_name(status: int) -> str:
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(status))


async def grpc_probe(host: str, port: int, service: str,
                     timeout: float) -> tuple[ProbeResult, str]:
    """Ask ``host:port`` whether ``service`` is SERVING, all within ``timeout`` seconds."""
    address = join_host_port(host, port)
    took = go_duration(timeout)
    deadline = time.monotonic() + timeout
    options = [("grpc.primary_user_agent", user_agent("probe")),
               # Probes go straight to the pod, never through a proxy from the environment.
               ("grpc.enable_http_proxy", 0)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout)
        except TimeoutError:
            klog.v(4).info("Failed to connect grpc service due to timeout", addr=address,
                           service=service, timeout=took)
            return (ProbeResult.FAILURE,
                    f'timeout: failed to connect service "{address}" within {took}: '
                    "context deadline exceeded")
        except Exception as err:
            klog.v(4).info("Failed to connect grpc service", addr=address, err=str(err))
            return (ProbeResult.FAILURE,
                    f'error: failed to connect service at "{address}": {err}')

        stub = health_pb2_grpc.HealthStub(channel)
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            response = await stub.Check(health_pb2.HealthCheckRequest(service=service),
                                        timeout=remaining)
        except grpc.aio.AioRpcError as err:
            return ProbeResult.FAILURE, _rpc_failure_output(err, address, service, took)

    status = response.status
    if status != health_pb2.HealthCheckResponse.SERVING:
        return (ProbeResult.FAILURE,
                f'service unhealthy (responded with "{_serving_status_name(status)}")')
    return ProbeResult.SUCCESS, "service healthy"


def _rpc_failure_output(err: grpc.aio.AioRpcError, address: str, service: str,
                        took: str) -> str:
    code = err.code()
    details = err.details() or ""
    if code == grpc.StatusCode.UNIMPLEMENTED:
        klog.v(4).info("Server does not implement the grpc health protocol", addr=address,
                       service=service)
        return ("error: this server does not implement the grpc health protocol "
                f"(grpc.health.v1.Health): {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        klog.v(4).info("Health rpc not finished within timeout", addr=address,
                       service=service, timeout=took)
        return f"timeout: health rpc did not complete within {took}"
    klog.v(4).info("Health rpc probe failed", addr=address, service=service,
                   code=_go_code_name(code), details=details)
    return (f"error: health rpc probe failed: rpc error: code = {_go_code_name(code)} "
            f"desc = {details}")


__all__ = ["grpc_probe"]
