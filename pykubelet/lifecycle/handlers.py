"""postStart / preStop hook execution (upstream ``pkg/kubelet/lifecycle/handlers.go``).

The runtime manager calls ``HandlerRunner.run`` right after starting a
container (postStart) and before stopping one (preStop); it owns the policy
(kill with ``FailedPostStartHook``, bound preStop by the grace period). This
module owns the mechanics, with upstream's semantics:

- ``exec``: ExecSync with no timeout of its own (the caller bounds preStop);
  a non-zero exit fails the hook, and the failure text carries the output;
- ``httpGet``: the host defaults to the pod IP; any response counts, whatever
  its status (upstream only fails a hook that got no answer); same-host
  redirects are followed; an ``https`` hook that meets a plain HTTP server is
  retried over ``http`` with a ``LifecycleHTTPFallback`` warning event;
- ``sleep``: waits the given seconds, cancelled with the caller;
- ``tcpSocket`` is kept in the API only for compatibility and always fails.

A failed hook raises ``LifecycleHookError`` whose text is upstream's message,
which the caller shows in the ``FailedPostStartHook``/``FailedPreStopHook``
event.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from kubernetes_asyncio.client import V1Container, V1LifecycleHandler, V1Pod

from pykubelet.api import pod_desc
from pykubelet.container import ContainerID
from pykubelet.cri.errors import CRIError, ExecTimeoutError
from pykubelet.events import WARNING, EventRecorder, describe
from pykubelet.probe.exec import CommandRunner, combined_output
from pykubelet.probe.http import HTTPGetError, http_get, request_for_http_get_action
from pykubelet.util import klog
from pykubelet.util.gotext import go_quote

REASON_HTTP_FALLBACK = "LifecycleHTTPFallback"

PodIPGetter = Callable[[V1Pod], str | Awaitable[str]]


class LifecycleHookError(Exception):
    """A hook failed; ``str()`` is the message users see in the hook's failure event."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.output = output



def _go_list(values: list[str]) -> str:
    # Go's %v of a []string: the items space-separated between brackets.
    return "[" + " ".join(values) + "]"


class HandlerRunner:
    """Runs lifecycle handlers; satisfies ``kuberuntime.container.LifecycleHandlerRunner``."""

    def __init__(self, runtime_service: CommandRunner, pod_ip_getter: PodIPGetter,
                 recorder: EventRecorder) -> None:
        self.runtime_service = runtime_service
        self.pod_ip_getter = pod_ip_getter
        self.recorder = recorder

    async def run(self, container_id: ContainerID, pod: V1Pod, container: V1Container,
                  handler: V1LifecycleHandler) -> str:
        """Run ``handler``; returns the exec output, raises ``LifecycleHookError`` on failure."""
        if handler._exec is not None:
            return await self._run_exec(container_id, pod, container,
                                        list(handler._exec.command or []))
        if handler.http_get is not None:
            path = handler.http_get.path or ""
            try:
                await self._run_http(pod, container, handler)
            except Exception as err:
                message = (f"HTTP lifecycle hook ({path}) for Container "
                           f"{go_quote(container.name)} in Pod {go_quote(pod_desc(pod))} "
                           f"failed - error: {err}")
                klog.v(1).info("HTTP lifecycle hook for Container in Pod failed", path=path,
                               containerName=container.name, pod=describe(pod), err=str(err))
                raise LifecycleHookError(message) from err
            return ""
        if handler.sleep is not None:
            # Cancellation (the grace period ran out, the kubelet stops) ends the sleep early.
            await asyncio.sleep(max(int(handler.sleep.seconds or 0), 0))
            return ""
        message = f"Cannot run handler: invalid handler: {handler}"
        klog.error("Cannot run handler", ValueError("invalid handler"), pod=describe(pod),
                   containerName=container.name)
        raise LifecycleHookError(message)

    async def _run_exec(self, container_id: ContainerID, pod: V1Pod, container: V1Container,
                        command: list[str]) -> str:
        output = ""
        try:
            # Upstream passes no timeout: preStop is bounded by the caller's grace period.
            result = await self.runtime_service.exec_sync(container_id.id, command, 0)
        except ExecTimeoutError as err:
            error_text = f'command "{" ".join(command)}" timed out'
            cause: Exception = err
        except CRIError as err:
            error_text = str(err)
            cause = err
        else:
            output = combined_output(result, limit=None)
            if result.exit_code == 0:
                return output
            stderr = result.stderr.decode(errors="replace")
            error_text = (f"command '{' '.join(command)}' exited with {result.exit_code}: "
                          f"{stderr}")
            cause = RuntimeError(error_text)
        message = (f"Exec lifecycle hook ({_go_list(command)}) for Container "
                   f"{go_quote(container.name)} in Pod {go_quote(pod_desc(pod))} failed - "
                   f"error: {error_text}, message: {go_quote(output)}")
        klog.v(1).info("Exec lifecycle hook for Container in Pod failed", execCommand=command,
                       containerName=container.name, pod=describe(pod), message=output,
                       err=error_text)
        raise LifecycleHookError(message, output) from cause

    async def _pod_ip(self, pod: V1Pod) -> str:
        answer = self.pod_ip_getter(pod)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    async def _run_http(self, pod: V1Pod, container: V1Container,
                        handler: V1LifecycleHandler) -> None:
        action = handler.http_get
        pod_ip = action.host or ""
        if not pod_ip:
            pod_ip = await self._pod_ip(pod)
            if not pod_ip:
                raise RuntimeError(f"failed to find networking container for pod "
                                   f"{describe(pod)}")
        request = request_for_http_get_action(action, container, pod_ip)
        try:
            # Any answer will do: the status code of a hook is not judged.
            await http_get(request.url, request.headers, None, purpose="lifecycle")
        except HTTPGetError as err:
            if not (err.plain_http_answer and request.url.startswith("https://")):
                raise
            klog.v(1).info("HTTPS request to lifecycle hook got HTTP response, retrying with HTTP",
                           pod=describe(pod), url=request.url, err=str(err))
            plain_url = "http://" + request.url.removeprefix("https://")
            headers = {name: values for name, values in request.headers.items()
                       if name != "Authorization"}
            await http_get(plain_url, headers, None, purpose="lifecycle")
            host = plain_url.removeprefix("http://").split("/", 1)[0]
            self.recorder.event(pod, WARNING, REASON_HTTP_FALLBACK,
                                f"request to HTTPS lifecycle hook {host} got HTTP response, "
                                "retry with HTTP succeeded")


__all__ = ["REASON_HTTP_FALLBACK", "HandlerRunner", "LifecycleHookError", "PodIPGetter"]
