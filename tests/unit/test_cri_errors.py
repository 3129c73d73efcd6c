"""Error mapping, endpoint parsing and error-log throttling of the CRI client (no server
involved)."""

from __future__ import annotations

import grpc
import grpc.aio
import pytest

from pykubelet.cri.errors import (
    CRIError,
    RuntimeUnavailableError,
    UnsupportedAPIError,
    from_rpc_error,
    is_not_found,
)
from pykubelet.cri.runtime import ErrorLogThrottle, endpoint_url, parse_endpoint

ENDPOINT = "unix:///run/test/containerd.sock"


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def test_error_names_method_code_and_details() -> None:
    err = from_rpc_error("RunPodSandbox",
                         _rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "bad config"), ENDPOINT)

    assert type(err) is CRIError
    assert (err.method, err.code, err.details) == (
        "RunPodSandbox", grpc.StatusCode.INVALID_ARGUMENT, "bad config")
    assert str(err) == (
        "RunPodSandbox failed: rpc error: code = InvalidArgument desc = bad config")


def test_unavailable_becomes_runtime_unavailable_naming_the_endpoint() -> None:
    err = from_rpc_error("ListContainers", _rpc_error(
        grpc.StatusCode.UNAVAILABLE, "connect: Connection refused (111)"), ENDPOINT)

    assert isinstance(err, RuntimeUnavailableError)
    assert err.method == "ListContainers"
    assert str(err).startswith(f"container runtime endpoint {ENDPOINT} is not reachable: "
                               "connection refused")


def test_unimplemented_version_means_no_cri_v1() -> None:
    err = from_rpc_error("Version", _rpc_error(grpc.StatusCode.UNIMPLEMENTED, "unknown service"),
                         ENDPOINT)

    assert isinstance(err, UnsupportedAPIError)
    assert ENDPOINT in str(err) and "CRI v1" in str(err)


def test_unimplemented_elsewhere_is_a_plain_cri_error() -> None:
    err = from_rpc_error("CheckpointContainer",
                         _rpc_error(grpc.StatusCode.UNIMPLEMENTED, "not supported"), ENDPOINT)

    assert type(err) is CRIError


@pytest.mark.parametrize("code, details, expected", [
    (grpc.StatusCode.NOT_FOUND, "container \"abc\" not found", True),
    (grpc.StatusCode.UNKNOWN, "failed to get sandbox: Not Found", True),
    (grpc.StatusCode.UNKNOWN, "failed to start shim", False),
    (grpc.StatusCode.INTERNAL, "id not found in index", False),
])
def test_is_not_found(code: grpc.StatusCode, details: str, expected: bool) -> None:
    assert is_not_found(from_rpc_error("ContainerStatus", _rpc_error(code, details),
                                       ENDPOINT)) is expected


def test_is_not_found_ignores_non_cri_errors() -> None:
    assert not is_not_found(KeyError("not found"))


@pytest.mark.parametrize("endpoint, path", [
    ("unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
    ("/run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
])
def test_endpoint_forms(endpoint: str, path: str) -> None:
    assert parse_endpoint(endpoint) == path
    assert endpoint_url(endpoint) == "unix://" + path


@pytest.mark.parametrize("endpoint, complaint", [
    ("tcp://127.0.0.1:1234", "protocol 'tcp' is not supported"),
    ("npipe:////./pipe/containerd", "protocol 'npipe' is not supported"),
    ("containerd.sock", "absolute"),
    ("unix://", "absolute"),
])
def test_unsupported_endpoints_are_rejected(endpoint: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_endpoint(endpoint)


def test_a_repeated_error_is_logged_once_a_minute_per_object() -> None:
    now = [0.0]
    throttle = ErrorLogThrottle(60.0, clock=lambda: now[0])
    assert throttle.should_log("rpc error: NotFound", "c1")
    assert not throttle.should_log("rpc error: NotFound", "c1")
    assert throttle.should_log("rpc error: Unavailable", "c1")  # another error: logged
    assert throttle.should_log("rpc error: NotFound", "c2")
    now[0] = 61.0
    assert throttle.should_log("rpc error: Unavailable", "c1")


def test_errors_of_containers_that_went_away_are_not_kept_forever() -> None:
    now = [0.0]
    throttle = ErrorLogThrottle(60.0, clock=lambda: now[0])
    for index in range(5000):
        now[0] = index * 0.1  # 500 s of containers failing once each, never cleared
        throttle.should_log("rpc error: NotFound", f"gone-{index}")
    # What is held is about the last minute's containers, not all 5000.
    assert throttle.size() <= 2 * 600 + 1
    assert not throttle.should_log("rpc error: NotFound", "gone-4999")
