"""pykubelet gives a static pod the UID the real Go kubelet 1.20 gives it.

A node swapped in place between the Go kubelet and pykubelet (issue 38) keeps
its static pods only if both kubelets derive the same UID from the same
manifest; otherwise each takes the other's pod for an orphan and recreates it.
The Go kubelet 1.20 (built from Debian's source, as the control plane) runs
standalone with manifests of common shapes in its static pod directory (the
unit tests' golden manifests: resources in odd spellings, volumes of most
kinds, probes, env, security contexts, the host's namespaces, tolerations, init
containers, labels and annotations, and the swap's own static pod as YAML); the
UIDs it reports (``/pods``, and its sandboxes' ``io.kubernetes.pod.uid``) must
be pykubelet's for the same files, read on another node name and path.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubelet.api.kubetypes import FILE_SOURCE
from pykubelet.cri import RemoteRuntimeService
from pykubelet.cri.errors import RuntimeUnavailableError
from pykubelet.sources.static import decode_static_pod
from tests.unit.test_static_pod_uid import GOLDEN
from testsupport.controlplane import cached_binaries
from testsupport.go_kubelet import GoKubeletProcess, standalone_go_kubelet
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

_BIN_DIR = cached_binaries()
pytestmark = [
    pytest.mark.containerd,
    pytest.mark.skipif(_BIN_DIR is None or not (_BIN_DIR / "kubelet").is_file(),
                       reason="no Go kubelet built (scripts/testbed/controlplane-build.sh)"),
]

PODS_SECONDS = 60.0
SANDBOX_SECONDS = 120.0
UID_LABEL = "io.kubernetes.pod.uid"
NAME_LABEL = "io.kubernetes.pod.name"
# Pods whose sandbox the standalone Go kubelet can start: the others wait for volumes
# (a claim, a config map) that only an API server provides.
WITH_SANDBOX = ("static-web", "uid-containers", "uid-host")


def sandbox_uids(endpoint: str) -> dict[str, str]:
    """The UID label of every sandbox, by pod name."""

    async def read() -> dict[str, str]:
        service = RemoteRuntimeService(endpoint, 30)
        await service.connect()
        try:
            return {s.labels.get(NAME_LABEL, ""): s.labels.get(UID_LABEL, "")
                    for s in await service.list_pod_sandboxes()}
        finally:
            await service.close()

    return asyncio.run(read())


@pytest.fixture
def go_kubelet(testbed: Testbed, tmp_path: Path) -> Iterator[GoKubeletProcess]:
    assert _BIN_DIR is not None
    with standalone_go_kubelet(tmp_path, testbed.endpoint, _BIN_DIR / "kubelet",
                               f"suid-{secrets.token_hex(3)}") as kubelet:
        yield kubelet


def test_pykubelet_gives_a_static_pod_the_uid_the_go_kubelet_gives_it(
        go_kubelet: GoKubeletProcess, testbed: Testbed) -> None:
    files = {}
    for name, (manifest, _) in GOLDEN.items():
        if name == "static-web":  # YAML, as the swap writes it
            files[name] = go_kubelet.write_pod(manifest)
        else:
            files[name] = go_kubelet.manifests / f"{name}.json"
            files[name].write_text(json.dumps(manifest))
    node = go_kubelet.node_name
    ours = {}
    for name, path in files.items():
        pod = decode_static_pod(path.read_bytes(), node_name="another-node", source=FILE_SOURCE,
                                location=f"/elsewhere/{path.name}")
        assert pod.metadata is not None
        ours[name] = pod.metadata.uid

    def listed() -> dict[str, str] | None:
        uids = {p["metadata"]["name"].removesuffix(f"-{node}"): p["metadata"]["uid"]
                for p in go_kubelet.pods()}
        return uids if uids.keys() >= files.keys() else None

    go_uids = wait_until(listed, PODS_SECONDS, "the Go kubelet's static pods",
                         on_timeout=lambda: go_kubelet.log_text()[-3000:])
    assert go_uids is not None
    print("UIDs the Go kubelet 1.20 gave:", json.dumps(go_uids, indent=1, sort_keys=True))
    assert ours == {name: go_uids[name] for name in files}

    def sandboxes() -> dict[str, str] | None:
        found = {name: uid for name, uid in sandbox_uids(testbed.endpoint).items()
                 if name.endswith(f"-{node}")}
        return found if found.keys() >= {f"{name}-{node}" for name in WITH_SANDBOX} else None

    def seen() -> str:
        statuses = {p["metadata"]["name"]: p.get("status", {}) for p in go_kubelet.pods()}
        return (f"sandboxes: {sandbox_uids(testbed.endpoint)}\npods: {statuses}\n"
                f"{go_kubelet.log_text()[-2000:]}")

    labelled = wait_until(sandboxes, SANDBOX_SECONDS, "the Go kubelet's sandboxes",
                          ignore=(RuntimeUnavailableError,), on_timeout=seen)
    assert labelled is not None
    assert {name: labelled[f"{name}-{node}"] for name in WITH_SANDBOX} == {
        name: ours[name] for name in WITH_SANDBOX}
    assert ours == {name: golden for name, (_, golden) in GOLDEN.items()}
