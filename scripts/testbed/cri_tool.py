#!/usr/bin/env python3
"""Small CRI v1 client used by containerd.sh to talk to the testbed runtime.

The shell script needs three things it cannot get from ``ctr``: whether the
CRI plugin (not just containerd) is serving, whether the CRI image service
already sees the imported images, and a way to stop and remove every pod
sandbox and container *through the runtime* so that CNI tears down networking
properly. Those are the subcommands here; each exits 0 on success and prints
a one-line reason to stderr otherwise. ``ps`` is for people: Debian has no
``crictl``, and ``ctr`` does not show the CRI's pod view, so it lists the pod
sandboxes and their containers as the kubelet sees them.

Usage:
    cri_tool.py wait-ready SOCKET TIMEOUT_SECONDS
    cri_tool.py wait-images SOCKET TIMEOUT_SECONDS IMAGE...
    cri_tool.py remove-all SOCKET
    cri_tool.py ps SOCKET
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

CALL_TIMEOUT_SECONDS = 10.0
# Teardown has no one to be graceful to: 0 makes containerd SIGKILL at once.
STOP_GRACE_SECONDS = 0


def _channel(socket_path: str) -> grpc.Channel:
    return grpc.insecure_channel(f"unix://{socket_path}")


def _poll(deadline_seconds: float, attempt: Callable[[], str | None]) -> str | None:
    """Call ``attempt`` until it returns None (success) or the deadline passes.

    Returns the last failure reason, or None on success.
    """
    deadline = time.monotonic() + deadline_seconds
    reason: str | None = "not tried"
    while time.monotonic() < deadline:
        reason = attempt()
        if reason is None:
            return None
        time.sleep(0.1)
    return reason


def wait_ready(socket_path: str, timeout: float) -> int:
    with _channel(socket_path) as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)

        def attempt() -> str | None:
            try:
                version = runtime.Version(api_pb2.VersionRequest(), timeout=2.0)
                status = runtime.Status(api_pb2.StatusRequest(), timeout=2.0)
            except grpc.RpcError as err:
                return f"{err.code().name}: {err.details()}"
            not_ready = [c.type for c in status.status.conditions if not c.status]
            if not_ready:
                return f"runtime conditions not ready: {', '.join(not_ready)}"
            print(f"{version.runtime_name} {version.runtime_version} "
                  f"(CRI {version.runtime_api_version})")
            return None

        reason = _poll(timeout, attempt)
    if reason is not None:
        print(f"CRI not ready after {timeout:.0f}s: {reason}", file=sys.stderr)
        return 1
    return 0


def wait_images(socket_path: str, timeout: float, images: list[str]) -> int:
    with _channel(socket_path) as channel:
        image_service = api_pb2_grpc.ImageServiceStub(channel)

        def attempt() -> str | None:
            missing = []
            for image in images:
                try:
                    response = image_service.ImageStatus(
                        api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=image)),
                        timeout=CALL_TIMEOUT_SECONDS)
                except grpc.RpcError as err:
                    return f"{err.code().name}: {err.details()}"
                if not response.image.id:
                    missing.append(image)
            return f"missing {' '.join(missing)}" if missing else None

        reason = _poll(timeout, attempt)
    if reason is not None:
        print(f"CRI does not see images: {reason}", file=sys.stderr)
        return 1
    return 0


def remove_all(socket_path: str) -> int:
    """Stop and remove every container and pod sandbox; report but survive failures."""
    failures = 0
    with _channel(socket_path) as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        containers = runtime.ListContainers(api_pb2.ListContainersRequest(),
                                            timeout=CALL_TIMEOUT_SECONDS).containers
        for container in containers:
            try:
                runtime.StopContainer(api_pb2.StopContainerRequest(
                    container_id=container.id, timeout=STOP_GRACE_SECONDS),
                    timeout=CALL_TIMEOUT_SECONDS + STOP_GRACE_SECONDS)
                runtime.RemoveContainer(api_pb2.RemoveContainerRequest(
                    container_id=container.id), timeout=CALL_TIMEOUT_SECONDS)
            except grpc.RpcError as err:
                failures += 1
                print(f"container {container.id[:13]}: {err.details()}", file=sys.stderr)
        sandboxes = runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(),
                                           timeout=CALL_TIMEOUT_SECONDS).items
        for sandbox in sandboxes:
            try:
                # StopPodSandbox is what runs the CNI DEL (veth, IPAM, portmap rules).
                runtime.StopPodSandbox(api_pb2.StopPodSandboxRequest(
                    pod_sandbox_id=sandbox.id), timeout=CALL_TIMEOUT_SECONDS * 3)
                runtime.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(
                    pod_sandbox_id=sandbox.id), timeout=CALL_TIMEOUT_SECONDS * 3)
            except grpc.RpcError as err:
                failures += 1
                print(f"sandbox {sandbox.id[:13]}: {err.details()}", file=sys.stderr)
    if containers or sandboxes:
        print(f"removed {len(containers)} containers and {len(sandboxes)} pod sandboxes"
              f" ({failures} failures)")
    return 1 if failures else 0


def _state_name(enum: object, value: int) -> str:
    # CONTAINER_RUNNING -> RUNNING, SANDBOX_NOTREADY -> NOTREADY
    name = enum.Name(value)  # type: ignore[attr-defined]
    return str(name).split("_", 1)[1]


def list_pods(socket_path: str) -> int:
    """Print every pod sandbox with its IP and containers, newest pod first."""
    with _channel(socket_path) as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        sandboxes = runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(),
                                           timeout=CALL_TIMEOUT_SECONDS).items
        containers = runtime.ListContainers(api_pb2.ListContainersRequest(),
                                            timeout=CALL_TIMEOUT_SECONDS).containers
        by_sandbox: dict[str, list[api_pb2.Container]] = {}
        for container in containers:
            by_sandbox.setdefault(container.pod_sandbox_id, []).append(container)
        print(f"{'POD / container':40} {'STATE':9} {'IP':15} {'ID':14} AGE")
        now = time.time()
        for sandbox in sorted(sandboxes, key=lambda s: s.created_at, reverse=True):
            status = runtime.PodSandboxStatus(api_pb2.PodSandboxStatusRequest(
                pod_sandbox_id=sandbox.id), timeout=CALL_TIMEOUT_SECONDS).status
            pod = f"{sandbox.metadata.namespace}/{sandbox.metadata.name}"
            age = f"{now - sandbox.created_at / 1e9:.0f}s"
            print(f"{pod:40} {_state_name(api_pb2.PodSandboxState, sandbox.state):9} "
                  f"{status.network.ip or '-':15} {sandbox.id[:13]:14} {age}")
            for container in sorted(by_sandbox.get(sandbox.id, []),
                                    key=lambda c: c.created_at):
                state = _state_name(api_pb2.ContainerState, container.state)
                name = f"{container.metadata.name} (attempt {container.metadata.attempt})"
                age = f"{now - container.created_at / 1e9:.0f}s"
                print(f"  {name:38} {state:9} {'':15} {container.id[:13]:14} {age}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "wait-ready":
        return wait_ready(argv[1], float(argv[2]))
    if len(argv) >= 4 and argv[0] == "wait-images":
        return wait_images(argv[1], float(argv[2]), argv[3:])
    if len(argv) == 2 and argv[0] == "remove-all":
        try:
            return remove_all(argv[1])
        except grpc.RpcError as err:
            print(f"remove-all: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    if len(argv) == 2 and argv[0] == "ps":
        try:
            return list_pods(argv[1])
        except grpc.RpcError as err:
            print(f"ps: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
