"""Errors raised by the CRI client, and the mapping from gRPC failures to them.

Callers of the CRI client (kuberuntime, PLEG, the prober) must decide what a
failure means: a container that vanished is routine, a runtime that is down
is not. gRPC reports both as an ``AioRpcError`` whose text does not say which
call failed; this module turns every such error into a ``CRIError`` that
names the CRI method, keeps the status code for decisions, and gives the
connection failures operators meet first (wrong socket, runtime stopped, a
runtime without CRI v1) their own types and a message that says what to fix.
"""

from __future__ import annotations

import grpc

# containerd answers some lookups of vanished objects with UNKNOWN and a
# wrapped "not found" text instead of NOT_FOUND, so the text is checked too.
_NOT_FOUND_TEXT = "not found"


class CRIError(Exception):
    """A CRI call failed: ``method`` is the RPC name, ``code`` the gRPC status code."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        self.method = method
        self.code = code
        self.details = details
        super().__init__(self._text())

    def _text(self) -> str:
        code = _code_name(self.code)
        return f"{self.method} failed: rpc error: code = {code} desc = {self.details}"


class RuntimeUnavailableError(CRIError):
    """The runtime cannot be reached at its endpoint (socket missing, refused, silent)."""

    def __init__(self, endpoint: str, reason: str, method: str = "Version",
                 code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> None:
        self.endpoint = endpoint
        self.reason = reason
        super().__init__(method, code, reason)

    def _text(self) -> str:
        return f"container runtime endpoint {self.endpoint} is not reachable: {self.reason}"


class UnsupportedAPIError(CRIError):
    """The runtime answers but does not implement the ``runtime.v1`` CRI services."""

    def __init__(self, endpoint: str, details: str, method: str = "Version") -> None:
        self.endpoint = endpoint
        super().__init__(method, grpc.StatusCode.UNIMPLEMENTED, details)

    def _text(self) -> str:
        return (f"container runtime at {self.endpoint} does not implement the CRI v1 "
                f"runtime API (runtime.v1.{self.method}: {self.details})")


class ExecTimeoutError(CRIError):
    """An ``ExecSync`` command ran past its timeout (the prober counts it as a failed probe)."""

    def __init__(self, cmd: str, timeout_seconds: float, details: str) -> None:
        self.cmd = cmd
        self.timeout_seconds = timeout_seconds
        super().__init__("ExecSync", grpc.StatusCode.DEADLINE_EXCEEDED, details)

    def _text(self) -> str:
        return f"command timed out: {self.cmd!r} timed out after {self.timeout_seconds:g}s"


class InvalidResponseError(CRIError):
    """The runtime answered OK but left out a field the CRI contract requires."""

    def __init__(self, method: str, details: str) -> None:
        super().__init__(method, grpc.StatusCode.UNKNOWN, details)

    def _text(self) -> str:
        return f"{self.method} returned an invalid response: {self.details}"


def _code_name(code: grpc.StatusCode) -> str:
    # Go's codes print in CamelCase ("NotFound"); keep that spelling so
    # messages match what operators know from the Go kubelet and crictl.
    return "".join(part.capitalize() for part in code.name.split("_"))


def from_rpc_error(method: str, err: grpc.aio.AioRpcError, endpoint: str) -> CRIError:
    """Wrap a failed RPC, choosing the subtype a caller would act on."""
    code = err.code()
    details = err.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return RuntimeUnavailableError(endpoint, _unavailable_reason(details), method, code)
    if code == grpc.StatusCode.UNIMPLEMENTED and method == "Version":
        return UnsupportedAPIError(endpoint, details, method)
    return CRIError(method, code, details)


def _unavailable_reason(details: str) -> str:
    lowered = details.lower()
    if "connection refused" in lowered:
        return f"connection refused (is the runtime running?): {details}"
    if "no such file" in lowered:
        return f"socket file does not exist: {details}"
    return details or "unavailable"


def is_not_found(err: BaseException) -> bool:
    """True when the runtime said the sandbox, container or image does not exist."""
    if not isinstance(err, CRIError):
        return False
    if err.code == grpc.StatusCode.NOT_FOUND:
        return True
    return err.code == grpc.StatusCode.UNKNOWN and _NOT_FOUND_TEXT in err.details.lower()


__all__ = [
    "CRIError",
    "ExecTimeoutError",
    "InvalidResponseError",
    "RuntimeUnavailableError",
    "UnsupportedAPIError",
    "from_rpc_error",
    "is_not_found",
]
