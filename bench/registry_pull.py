"""A cold pull from the private registry: pykubelet beside ``ctr images pull`` (the floor).

The testbed registry (``testsupport/registry.py``: TLS, basic auth) serves a
copy of the test busybox. Each round pulls it three ways on a private
containerd whose content store holds none of its blobs or snapshots:

- **ctr images pull**: ``ctr -n k8s.io images pull`` with the registry user's
  credentials and the testbed's hosts directory, unpacked into the CRI's
  snapshotter: the floor, containerd's own pull with no CRI or kubelet (its
  process start included: it may well be slower than the CRI pull);
- **CRI PullImage**: the same pull through the CRI (pykubelet's client, the same
  credentials), what any kubelet's pull costs at the least;
- **pykubelet**: a static pod naming the image (``IfNotPresent``) written to a
  standalone pykubelet whose credentials come from a credential provider
  plugin (its answer cached by a warm-up pull, so the plugin's exec is not in
  the rounds): manifest written -> the image present in the runtime (an
  ``ImageStatus`` poll) and -> the container started (the runtime's
  ``startedAt``, as the other benchmarks detect Running). The first includes
  the pod's sandbox, made before the pull as upstream's kubelet does; the
  duration pykubelet's ``Pulled`` event reports is printed beside them.

Between pulls the image is removed with ``ctr images rm --sync`` (containerd's
garbage collection runs before it returns), under each of its references,
the pod's sandbox and containers are removed, and the content and snapshot
counts are checked back at what they were before the first pull: every pull
is cold. The testbed's own busybox import (the same blobs) is removed first
for that reason.

Run as root: ``bash scripts/bench.sh registry_pull [--rounds N] [--poll-ms MS]``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cri_api.v1 import api_pb2

from bench.harness import (
    KUBELET_ARGS,
    BenchmarkError,
    RunningWatcher,
    client_log_lines,
    percentile,
    pod_manifest,
    run_on_testbed,
    wait_pods_gone,
)
from pykubelet.config.units import Duration
from pykubelet.cri import CRIError
from pykubelet.cri.image import RemoteImageService
from pykubelet.cri.runtime import RemoteRuntimeService
from testsupport.kubelet_process import KubeletProcess
from testsupport.registry import Registry, RegistryError, credential_plugin_flags
from testsupport.testbed import Testbed

REPOSITORY = "pykubelet/bench-busybox"
CTR_TIMEOUT_SECONDS = 120.0
PULL_TIMEOUT_SECONDS = 120.0
# Answers for the registry with the user and password it is given; cached for the run.
LOGIN_PLUGIN = """\
import json, os, sys
request = json.load(sys.stdin)
print(json.dumps({
    "apiVersion": request["apiVersion"], "kind": "CredentialProviderResponse",
    "cacheKeyType": "Registry", "cacheDuration": "1h",
    "auth": {os.environ["REGISTRY_HOST"]: {"username": os.environ["REGISTRY_USER"],
                                           "password": os.environ["REGISTRY_PASSWORD"]}}}))
"""
SIDES = ("ctr images pull", "CRI PullImage", "pykubelet: image present",
         "pykubelet: container started", "pykubelet: its Pulled event")
# pykubelet's log line beside its Pulled event (logged at --v=3 only), with the duration.
PULLED_IN = re.compile(
    r'"Successfully pulled image" pod="[^"]*/pull-[^"]*".* duration="([0-9.]+s)"')


class Runtime:
    """The testbed's containerd through ``ctr`` (pulls, removal, counts) and the CRI."""

    def __init__(self, testbed: Testbed, registry: Registry) -> None:
        self.testbed = testbed
        self.registry = registry
        self.snapshotter = _configured_snapshotter(testbed.dir / "config.toml")
        self.images = RemoteImageService(testbed.endpoint, 60)
        self.runtime = RemoteRuntimeService(testbed.endpoint, 60)

    def ctr(self, *args: str) -> str:
        argv = ["ctr", "-a", str(self.testbed.socket_path), "-n", "k8s.io", *args]
        result = subprocess.run(argv, capture_output=True, text=True,
                                timeout=CTR_TIMEOUT_SECONDS, check=False)
        if result.returncode != 0:
            raise BenchmarkError(f"{' '.join(argv[:6])} ... failed: {result.stderr.strip()}")
        return result.stdout

    def stored(self) -> tuple[int, int]:
        """How many content blobs and snapshots containerd holds."""
        content = self.ctr("content", "ls", "-q").split()
        snapshots = self.ctr("snapshots", "--snapshotter", self.snapshotter, "ls").splitlines()
        return len(content), max(0, len(snapshots) - 1)  # less the header line

    def remove_images_but(self, kept: str) -> None:
        """Remove every image reference but those of ``kept``'s content (its name, digest
        and id references), waiting for the garbage collection."""
        rows = [line.split() for line in self.ctr("images", "ls").splitlines()[1:]]
        digests = {row[0]: row[2] for row in rows if len(row) > 2}
        if kept not in digests:
            raise BenchmarkError(f"no image {kept} in the testbed's containerd")
        for ref, digest in digests.items():
            if digest != digests[kept]:
                self.ctr("images", "rm", "--sync", ref)

    async def remove_sandboxes(self, poll_seconds: float) -> None:
        """Remove every pod sandbox (with its containers). The kubelet may be removing the
        same ones: a call that meets its removal is tried again after the next listing."""
        deadline = time.monotonic() + PULL_TIMEOUT_SECONDS
        while sandboxes := await self.runtime.list_pod_sandboxes():
            if time.monotonic() > deadline:
                raise BenchmarkError(f"{len(sandboxes)} sandbox(es) not removed in time")
            for sandbox in sandboxes:
                try:
                    await self.runtime.stop_pod_sandbox(sandbox.id)
                    await self.runtime.remove_pod_sandbox(sandbox.id)
                except CRIError:
                    await asyncio.sleep(poll_seconds)

    def ctr_pull(self, image: str) -> float:
        """Seconds ``ctr images pull`` took, unpacking into the CRI's snapshotter."""
        started = time.monotonic()
        self.ctr("images", "pull", "--hosts-dir", str(self.testbed.dir / "certs.d"),
                 "--user", f"{self.registry.username}:{self.registry.password}",
                 "--snapshotter", self.snapshotter, image)
        return time.monotonic() - started

    async def cri_pull(self, image: str) -> float:
        auth = api_pb2.AuthConfig(username=self.registry.username,
                                  password=self.registry.password)
        started = time.monotonic()
        await self.images.pull_image(image, auth)
        return time.monotonic() - started

    async def wait_present(self, image: str, poll_seconds: float) -> float:
        deadline = time.monotonic() + PULL_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            status = await self.images.image_status(image)
            if status is not None and status.id:
                return time.monotonic()
            await asyncio.sleep(poll_seconds)
        raise BenchmarkError(f"{image} not present after {PULL_TIMEOUT_SECONDS:g}s")


def _configured_snapshotter(config: Path) -> str:
    for line in config.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "snapshotter":
            return value.strip().strip('"')
    raise BenchmarkError(f"no snapshotter in {config}")


def plugin_args(work_dir: Path, registry: Registry) -> list[str]:
    return credential_plugin_flags(
        work_dir, name="registry-login", source=LOGIN_PLUGIN,
        match_image=f"{registry.host}/{REPOSITORY}", cache_duration="1h",
        env={"REGISTRY_HOST": registry.host, "REGISTRY_USER": registry.username,
             "REGISTRY_PASSWORD": registry.password})


async def kubelet_pull(runtime: Runtime, kubelet: KubeletProcess, watcher: RunningWatcher,
                       image: str, name: str, poll_seconds: float) -> tuple[float, float]:
    """Seconds from writing the pod's manifest until its image is present, and until its
    container started; the pod is removed again afterwards."""
    manifest: dict[str, Any] = pod_manifest(name, image)
    manifest["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    started = time.monotonic()
    path = kubelet.write_pod(manifest)
    present_at = await runtime.wait_present(image, poll_seconds)
    pod_name = f"{name}-{kubelet.node_name}"
    (running_at,) = await watcher.wait_running([pod_name], kubelet)
    path.unlink()
    await wait_pods_gone(runtime.runtime, [pod_name], poll_seconds, kubelet)
    await runtime.remove_sandboxes(poll_seconds)  # exited ones hold the image's layers
    return present_at - started, running_at - started


def reported_pulls(log: str, rounds: int) -> list[float]:
    """Seconds of each measured round's pull, as pykubelet reports them (its Pulled event's
    duration)."""
    found = [Duration.parse(match[1]).total_seconds()
             for line in log.splitlines() if (match := PULLED_IN.search(line))]
    if len(found) != rounds:
        raise BenchmarkError(f"{len(found)} pulls logged by pykubelet for {rounds} rounds")
    return found


async def measure(testbed: Testbed, work_dir: Path, kubelets: list[Any], *, rounds: int,
                  poll_seconds: float) -> dict[str, list[float]]:
    registry = Registry(work_dir / "registry", testbed.images_dir)
    runtime: Runtime | None = None
    print("starting the registry ...", file=sys.stderr, flush=True)
    try:
        await asyncio.to_thread(registry.start)
        await asyncio.to_thread(registry.trust, testbed)
        image = await asyncio.to_thread(registry.copy_image, registry.busybox_image, REPOSITORY)
        runtime = Runtime(testbed, registry)
        await runtime.images.connect()
        await runtime.runtime.connect()
        # The testbed's busybox import holds the same blobs: gone, so each pull is cold
        # (the pause image stays: every sandbox needs it).
        runtime.remove_images_but(testbed.pause_image)
        empty = runtime.stored()

        def cold() -> None:
            # The CRI keeps a pulled image under its name, its digest and its id.
            runtime.remove_images_but(testbed.pause_image)
            if (stored := runtime.stored()) != empty:
                raise BenchmarkError(f"containerd kept content/snapshots {stored} after "
                                     f"removing {image} (before the first pull: {empty})")

        kubelet = KubeletProcess(work_dir / "kubelet", testbed.endpoint,
                                 extra_config={"syncFrequency": "1m",
                                               "fileCheckFrequency": "20s"},
                                 extra_args=[*KUBELET_ARGS, *plugin_args(work_dir, registry)])
        kubelets.append(kubelet)
        print("starting pykubelet ...", file=sys.stderr, flush=True)
        await asyncio.to_thread(kubelet.start)
        figures: dict[str, list[float]] = {side: [] for side in SIDES}
        async with RunningWatcher(runtime.runtime, poll_seconds) as watcher:
            # Warm-up: the plugin's answer cached, the kubelet's first pod done.
            await kubelet_pull(runtime, kubelet, watcher, image, "warm-up", poll_seconds)
            for index in range(rounds):
                print(f"round {index + 1}/{rounds} ...", file=sys.stderr, flush=True)
                cold()
                figures[SIDES[0]].append(runtime.ctr_pull(image))
                cold()
                figures[SIDES[1]].append(await runtime.cri_pull(image))
                cold()
                present, running = await kubelet_pull(runtime, kubelet, watcher, image,
                                                       f"pull-{index}", poll_seconds)
                figures[SIDES[2]].append(present)
                figures[SIDES[3]].append(running)
        figures[SIDES[4]] = reported_pulls(kubelet.log_text(), rounds)
        return figures
    finally:
        if runtime is not None:
            await runtime.images.close()
            await runtime.runtime.close()
        await asyncio.to_thread(registry.stop)


def render(figures: dict[str, list[float]], rounds: int) -> str:
    ctr_p50, cri_p50 = (percentile(figures[side], 0.5) for side in SIDES[:2])
    lines = [f"cold pull of the registry's busybox over TLS with basic auth ({rounds} rounds, "
             f"ms; content store emptied before each pull)",
             f"  {'':30}{'p50':>9}{'p99':>9}{'x ctr p50':>11}{'x CRI p50':>11}"]
    for side in SIDES:
        p50 = percentile(figures[side], 0.5)
        lines.append(f"  {side:30}{p50 * 1000:9.1f}{percentile(figures[side], 0.99) * 1000:9.1f}"
                     f"{p50 / ctr_p50:11.2f}{p50 / cri_p50:11.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="cold pulls per side (default 5)")
    parser.add_argument("--poll-ms", type=float, default=20.0,
                        help="period of the CRI polls that see the image and the container "
                             "(default 20)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.poll_ms <= 0:
        parser.error("--rounds must be >= 1 and --poll-ms > 0")
    results: dict[str, dict[str, list[float]]] = {}

    async def body(testbed: Testbed, work_dir: Path, kubelets: list[Any]) -> None:
        results["figures"] = await measure(testbed, work_dir, kubelets, rounds=args.rounds,
                                           poll_seconds=args.poll_ms / 1000)

    client_log: dict[str, int] = {}
    status = run_on_testbed(body, client_log=client_log, errors=(RegistryError,))
    if status == 0:
        print("\n".join([render(results["figures"], args.rounds),
                         *client_log_lines(client_log)]))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
