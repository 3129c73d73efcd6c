"""The ``/healthz`` endpoints, answering as Kubernetes components do
(``k8s.io/apiserver/pkg/server/healthz``).

Liveness probes, systemd watchdogs and operators poll ``/healthz`` on the
kubelet and expect the same contract as every Kubernetes component: 200
``ok`` when every check passes; otherwise 500 with one ``[+]name ok`` /
``[-]name failed: reason withheld`` line per check and ``healthz check
failed``. The aggregate hides failure details because it is unauthenticated;
``/healthz/<name>`` gives the reason of one check, and ``?verbose`` lists
every check even on success. ``?exclude=<name>`` skips a check. The ``ping``
check is always present.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from pykubelet.server.plaintext import plain_text
from pykubelet.util import klog


class HealthChecker(Protocol):
    """One named health check: ``check()`` returns None when healthy, else why not."""

    @property
    def name(self) -> str: ...

    def check(self) -> str | None: ...


@dataclass(frozen=True)
class PingCheck:
    """Always healthy: proves the HTTP server itself answers."""

    name: str = "ping"

    def check(self) -> str | None:
        return None


@dataclass(frozen=True)
class LogCheck:
    """Upstream's ``log`` check: logging is not wedged (a write to the log succeeded)."""

    name: str = "log"

    def check(self) -> str | None:
        return None


def _with_ping(checks: Sequence[HealthChecker]) -> list[HealthChecker]:
    if any(c.name == "ping" for c in checks):
        return list(checks)
    return [PingCheck(), *checks]


def _run_check(check: HealthChecker) -> str | None:
    try:
        return check.check()
    except Exception as err:
        # A crashing check is a failing check, not a crashing endpoint.
        return f"check raised {type(err).__name__}: {err}"


def healthz_routes(checks: Sequence[HealthChecker], path: str = "/healthz") -> list[web.RouteDef]:
    """Routes for ``path`` (aggregate), ``path/ping`` and ``path/<name>`` per check."""
    all_checks = _with_ping(checks)

    async def aggregate(request: web.Request) -> web.Response:
        excluded = {name.strip() for value in request.query.getall("exclude", [])
                    for name in value.split(",") if name.strip()}
        lines = []
        failed = []
        reasons = []
        for check in all_checks:
            if check.name in excluded:
                lines.append(f"[+]{check.name} excluded: ok")
                excluded.discard(check.name)
                continue
            reason = _run_check(check)
            if reason is None:
                lines.append(f"[+]{check.name} ok")
            else:
                lines.append(f"[-]{check.name} failed: reason withheld")
                reasons.append(f"[-]{check.name} failed: {reason}")
                failed.append(check.name)
        if excluded:
            klog.warning("Cannot exclude some health checks, no health checks are installed "
                         "matching", checks=",".join(sorted(excluded)))
        if failed:
            klog.v(2).info("Health check failed", checks=",".join(failed),
                           details="; ".join(reasons))
            return plain_text(500, "\n".join(lines) + "\nhealthz check failed\n")
        if "verbose" not in request.query:
            return plain_text(200, "ok")
        return plain_text(200, "\n".join(lines) + "\nhealthz check passed\n")

    def single(check: HealthChecker) -> web.RouteDef:
        async def handle(_: web.Request) -> web.Response:
            reason = _run_check(check)
            if reason is None:
                return plain_text(200, "ok")
            return plain_text(500, f"internal server error: {reason}\n")

        return web.get(f"{path}/{check.name}", handle)

    return [web.get(path, aggregate), *(single(check) for check in all_checks)]
