"""Protocol-level health checks (upstream ``pkg/probe``): exec, HTTP GET, TCP and gRPC.

Each check answers one question about one endpoint or command and returns a
``(ProbeResult, output)`` pair; the output is what a user reads in the
``Unhealthy`` event when the check fails. Nothing here knows about pods,
thresholds or periods: the prober (``pykubelet.prober``) and the lifecycle
hook runner (``pykubelet.lifecycle``) build the target from the pod spec and
decide what a result means. The result enum is the one the runtime manager
already consumes (``kuberuntime.actions.ProbeResult``), so verdicts flow from
here to container kills without translation.

This module also holds what every check shares: port resolution against the
container's named ports, the ``kube-<purpose>/<major>.<minor>`` User-Agent, and
Go-style duration text for messages that users compare with the Go kubelet's.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import V1Container

from pykubelet.api.wellknown import KUBERNETES_VERSION
from pykubelet.container import ProbeResult

# Upstream caps what a probe reads from a response or a command (10 KiB): the
# output ends up in events and logs, which must stay small.
MAX_OUTPUT_BYTES = 10 * 1024


class PortResolutionError(ValueError):
    """A probe or hook names a port the container does not declare, or an invalid number."""


def resolve_container_port(port: Any, container: V1Container) -> int:
    """Turn an IntOrString port into a number: a named container port first, then digits.

    Named ports win over digits because a port may legitimately be named
    ``"8080"``; only when no port has that name is the text read as a number.
    """
    number: int
    if isinstance(port, bool) or port is None:
        raise PortResolutionError(f"intOrString had no kind: {port!r}")
    if isinstance(port, int):
        number = port
    elif isinstance(port, str):
        named = _find_port_by_name(container, port)
        if named is not None:
            number = named
        else:
            try:
                number = int(port, 10)
            except ValueError:
                raise PortResolutionError(
                    f'strconv.Atoi: parsing "{port}": invalid syntax') from None
    else:
        raise PortResolutionError(f"intOrString had no kind: {port!r}")
    if 0 < number < 65536:
        return number
    raise PortResolutionError(f"invalid port number: {number}")


def _find_port_by_name(container: V1Container, name: str) -> int | None:
    for declared in container.ports or []:
        if declared.name == name:
            return int(declared.container_port)
    return None


def user_agent(purpose: str) -> str:
    """``kube-probe/1.35`` for probes, ``kube-lifecycle/1.35`` for hooks, as upstream sends."""
    major, _, minor = KUBERNETES_VERSION.removeprefix("v").partition(".")
    minor = minor.split(".")[0]
    return f"kube-{purpose}/{major}.{minor}"


def join_host_port(host: str, port: int) -> str:
    """``host:port``, with IPv6 literals bracketed so the text is a valid URL authority."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def go_duration(seconds: float) -> str:
    """Seconds as Go prints a ``time.Duration`` (``1s``, ``1.5s``, ``500ms``, ``2m0s``).

    Messages such as gRPC probe timeouts embed durations; keeping Go's text
    lets users match them against the Go kubelet's documentation and alerts.
    """
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        millis = seconds * 1000
        return f"{_trim(millis)}ms"
    minutes, rest = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    text = f"{_trim(rest)}s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


def _trim(value: float) -> str:
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"


__all__ = [
    "MAX_OUTPUT_BYTES",
    "PortResolutionError",
    "ProbeResult",
    "go_duration",
    "join_host_port",
    "resolve_container_port",
    "user_agent",
]
