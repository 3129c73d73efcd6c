"""A real ``pykubelet`` process for end-to-end tests and benchmarks, and what a user sees of it.

Tests and benchmarks drive pykubelet the way an operator does: write static pod files,
start the command with a KubeletConfiguration, read ``/pods`` on the
read-only port and the runtime's own view through CRI. Nothing is faked:
the process talks to the testbed's containerd.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from pykubelet.cm.cgroups import CgroupError, CgroupManager, parse_cgroupfs_name
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.polling import wait_until

NODE_NAME = "e2e-node"
# cgroupRoots created by this test process, removed by remove_everything.
_CGROUP_ROOTS: set[str] = set()
# The kubelets' root directories: the tmpfs volumes of pods that outlived their
# kubelet (a stopped kubelet leaves its pods, as upstream) are unmounted with them.
_ROOT_DIRS: set[Path] = set()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class KubeletProcess:
    """One pykubelet with its own root, log dir, manifests dir and ports."""

    def __init__(self, base: Path, endpoint: str, extra_config: dict[str, Any] | None = None,
                 extra_args: list[str] | None = None, ports: tuple[int, int] | None = None,
                 node_name: str = NODE_NAME) -> None:
        self.base = base
        self.node_name = node_name
        self.endpoint = endpoint
        self.manifests = base / "manifests"
        self.root = base / "root"
        _ROOT_DIRS.add(self.root)
        self.logs_dir = base / "pod-logs"
        self.log_file = base / "kubelet.log"
        self.read_only_port, self.healthz_port = ports or (free_port(), free_port())
        self.port = free_port()
        self.cert_dir = base / "pki"
        self.manifests.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            **self.serving_config(),
            "fileCheckFrequency": "20s",
            "podLogsDir": str(self.logs_dir),
            "containerRuntimeEndpoint": endpoint,
            "syncFrequency": "10s",
            # The test machines run cgroup v1, which the default (true) refuses.
            "failCgroupV1": False,
            # Each kubelet owns a private cgroup tree: kubelets of parallel tests must
            # never see (and clean up) each other's pod cgroups.
            "cgroupRoot": f"/pykubelet-e2e-{secrets.token_hex(4)}",
        }
        config.update(extra_config or {})
        self.cgroup_root = str(config.get("cgroupRoot") or "")
        self.ensure_cgroup_root()
        self.config_path = base / "kubelet.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None

    def serving_config(self) -> dict[str, Any]:
        """Where a test kubelet listens and what it serves: loopback, its own ports, the
        static pods of its manifests directory, and the kubelet API on its own port with
        no webhooks (standalone: there is no API server to ask)."""
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "readOnlyPort": self.read_only_port,
            "port": self.port,
            "authentication": {"webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "staticPodPath": str(self.manifests),
        }

    # -- process ------------------------------------------------------------

    def ensure_cgroup_root(self) -> None:
        """The cgroupRoot must exist before the kubelet starts (as upstream requires): made
        here, for tests that run this configuration in their own process too, and again at
        each start, since a stop removes it once it is empty."""
        if self.cgroup_root and self.cgroup_root != "/":
            CgroupManager().create(parse_cgroupfs_name(self.cgroup_root))
            _CGROUP_ROOTS.add(self.cgroup_root)

    def start(self) -> None:
        self.ensure_cgroup_root()
        log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pykubelet", "--config", str(self.config_path),
             "--root-dir", str(self.root), "--cert-dir", str(self.cert_dir),
             "--hostname-override", self.node_name,
             "--node-ip", "127.0.0.1", "--v=4", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        try:
            self.wait_for(lambda: self.healthz() == "ok", 30, "kubelet healthz")
        except BaseException:
            self.stop()  # a kubelet that never became healthy must not outlive the test
            raise

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(5)
        _remove_cgroup_root_if_empty(self.cgroup_root)
        return code


    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    # -- manifests ------------------------------------------------------------

    def write_pod(self, manifest: dict[str, Any], filename: str | None = None) -> Path:
        path = self.manifests / (filename or f"{manifest['metadata']['name']}.yaml")
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(yaml.safe_dump(manifest))
        os.replace(tmp, path)
        return path

    # -- what a user sees -----------------------------------------------------

    def healthz(self) -> str | None:
        try:
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.healthz_port}/healthz", timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            return None

    def probe_metrics(self) -> str:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{self.read_only_port}/metrics/probes", timeout=5) as response:
            return str(response.read().decode())

    def events(self, reason: str) -> list[str]:
        """Event lines logged with this reason (in standalone mode events go to the log)."""
        return [line for line in self.log_text().splitlines()
                if '"Event occurred"' in line and f'reason="{reason}"' in line]

    def pods(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{self.read_only_port}/pods", timeout=5) as response:
            body = json.loads(response.read())
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def pod(self, name: str) -> dict[str, Any] | None:
        full = f"{name}-{self.node_name}"
        return next((p for p in self.pods() if p["metadata"]["name"] == full), None)

    def status(self, name: str) -> dict[str, Any]:
        pod = self.pod(name)
        return (pod or {}).get("status") or {}

    def container_status(self, name: str, container: str, init: bool = False) -> dict[str, Any]:
        key = "initContainerStatuses" if init else "containerStatuses"
        for status in self.status(name).get(key) or []:
            if status["name"] == container:
                return dict(status)
        return {}

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str) -> Any:
        """``polling.wait_until`` that stops at once if pykubelet exits, and ends in its log.

        A condition reading what is not there yet (a file, a status field) is polled again.
        """
        def alive_and_condition() -> Any:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"pykubelet exited ({self.process.returncode}) while "
                                     f"waiting for {what}:\n{self.log_text()[-4000:]}")
            return condition()

        return wait_until(alive_and_condition, timeout, what,
                          ignore=(OSError, KeyError, TypeError, ValueError),
                          on_timeout=lambda: f"kubelet log tail:\n{self.log_text()[-4000:]}")

    def wait_phase(self, name: str, phase: str, timeout: float = 60) -> dict[str, Any]:
        return dict(self.wait_for(
            lambda: (s := self.status(name)).get("phase") == phase and s, timeout,
            f"pod {name} phase {phase}"))

    def wait_log_lines(self, name: str, container: str, count: int,
                       timeout: float = 30) -> None:
        """Until the runtime's log files of static pod ``name``'s ``container`` hold ``count``
        lines: what a test of log reading needs written first (Running comes sooner)."""
        pattern = f"default_{name}-{self.node_name}_*/{container}/*.log"

        def written() -> bool:
            return sum(len(path.read_bytes().splitlines())
                       for path in self.logs_dir.glob(pattern)) >= count
        self.wait_for(written, timeout, f"{count} log lines of {name}/{container}")


def busybox_pod(name: str, containers: list[dict[str, Any]], image: str,
                **spec: Any) -> dict[str, Any]:
    def with_image(container: dict[str, Any]) -> dict[str, Any]:
        return {"image": image, **container}

    body: dict[str, Any] = {"containers": [with_image(c) for c in containers]}
    if "initContainers" in spec:
        spec["initContainers"] = [with_image(c) for c in spec["initContainers"]]
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def runtime_view(endpoint: str) -> dict[str, Any]:
    """The runtime's own view: sandboxes and containers by pod UID label."""

    async def collect() -> dict[str, Any]:
        service = RemoteRuntimeService(endpoint, 30)
        await service.connect()
        try:
            sandboxes = await service.list_pod_sandboxes()
            containers = await service.list_containers()
        finally:
            await service.close()
        return {"sandboxes": sandboxes, "containers": containers}

    return asyncio.run(collect())


def exec_in(endpoint: str, container_id: str, *command: str) -> int:
    """Run a command in a container through CRI (as ``kubectl exec`` would); its exit code."""
    cid = container_id.split("://", 1)[-1]

    async def run() -> int:
        service = RemoteRuntimeService(endpoint, 30)
        await service.connect()
        try:
            result = await service.exec_sync(cid, list(command), 10)
        finally:
            await service.close()
        return result.exit_code

    return asyncio.run(run())


def _remove_cgroup_root_if_empty(root: str) -> None:
    """A stopped kubelet's tree goes at once when no pod outlived it (none was adopted)."""
    if root not in _CGROUP_ROOTS:
        return
    cgroups = CgroupManager()
    name = parse_cgroupfs_name(root)
    with contextlib.suppress(CgroupError, OSError):
        if not cgroups.pids(name):
            cgroups.destroy(name)
            _CGROUP_ROOTS.discard(root)


def unmount_pod_volumes() -> None:
    """Unmount the tmpfs volumes left under this process's kubelet roots (deepest first)."""
    prefixes = tuple(f"{root.resolve()}/" for root in _ROOT_DIRS)
    if not prefixes:
        return
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        points = [fields[4] for line in info if len(fields := line.split()) > 4
                  and fields[4].startswith(prefixes)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


@atexit.register
def _remove_cgroup_roots() -> None:
    """Whatever a test left (pods that outlived their kubelet) goes with the test process."""
    for root in sorted(_CGROUP_ROOTS):
        with contextlib.suppress(CgroupError, OSError):
            CgroupManager().destroy(parse_cgroupfs_name(root))
    _CGROUP_ROOTS.clear()


def remove_everything(endpoint: str) -> None:
    """Stop and remove every sandbox in the testbed, so tests do not leak pods."""

    async def clean() -> None:
        service = RemoteRuntimeService(endpoint, 60)
        await service.connect()
        try:
            for sandbox in await service.list_pod_sandboxes():
                await service.stop_pod_sandbox(sandbox.id)
                await service.remove_pod_sandbox(sandbox.id)
        finally:
            await service.close()

    asyncio.run(clean())
    unmount_pod_volumes()
    # The kubelets' private cgroup trees go once their pods are gone (pods outlive a
    # kubelet restart, so a stopped kubelet's tree stays until here).
    for root in sorted(_CGROUP_ROOTS):
        with contextlib.suppress(CgroupError):
            CgroupManager().destroy(parse_cgroupfs_name(root))
    _CGROUP_ROOTS.clear()


@contextlib.contextmanager
def running_kubelet(base: Path, endpoint: str,
                    extra_config: dict[str, Any] | None = None) -> Iterator[KubeletProcess]:
    """A started pykubelet; stopped, and every pod of the testbed removed, afterwards."""
    process = KubeletProcess(base, endpoint, extra_config=extra_config)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        remove_everything(endpoint)
