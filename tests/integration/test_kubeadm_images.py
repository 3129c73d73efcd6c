"""The images kubeadm v1.20's manifests name run on the containerd testbed.

build-images.sh --kubeadm packs the control plane's programs (and etcd,
pause, kube-proxy's iptables and conntrack) into images under kubeadm's
names. Each is imported into a real containerd and its program run the way
kubeadm's manifests run it (by name on PATH for the static pods,
/usr/local/bin/kube-proxy for the add-on), asked for its version.
"""

from __future__ import annotations

import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from testsupport.controlplane import kubeadm_binary
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd

# Five programs packed and compressed: minutes on a loaded 2-core machine
# the first time, nothing afterwards.
RUN_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class KubeadmImages:
    bin_dir: Path
    names: list[str]
    kubernetes_version: str

    def name(self, repository: str) -> str:
        """The full name of the image of ``repository`` (``kube-proxy``, ``etcd``)."""
        matches = [n for n in self.names if n.rsplit(":", 1)[0].endswith("/" + repository)]
        assert len(matches) == 1, f"{repository} in {self.names}"
        return matches[0]


@pytest.fixture(scope="module")
def kubeadm_images(testbed: Testbed) -> KubeadmImages:
    """The kubeadm images built from the control-plane cache and imported."""
    bin_dir = kubeadm_binary(build=True).parent
    testbed.import_archives(testbed.build_kubeadm_images(bin_dir))
    out = testbed.images_dir / "kubeadm"
    version = subprocess.run([str(bin_dir / "kubeadm"), "version", "-o", "short"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return KubeadmImages(bin_dir, (out / "complete").read_text().split(), version)


def ctr(testbed: Testbed, *args: str, timeout: float = RUN_TIMEOUT_SECONDS
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", "--address", str(testbed.socket_path), "-n", "k8s.io", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_in(testbed: Testbed, image: str, *argv: str, privileged: bool = False) -> str:
    """Run ``argv`` in a new container of ``image`` (its own network namespace);
    its output (stdout and stderr). The container is removed afterwards."""
    container_id = f"kubeadm-image-{secrets.token_hex(4)}"
    snapshotter = (testbed.dir / "snapshotter").read_text().strip()
    options = ["--rm", "--snapshotter", snapshotter, *(["--privileged"] if privileged else [])]
    try:
        result = ctr(testbed, "run", *options, image, container_id, *argv)
    finally:
        if container_id in ctr(testbed, "containers", "ls", "-q").stdout.split():
            ctr(testbed, "tasks", "kill", "-s", "SIGKILL", container_id)
            ctr(testbed, "containers", "rm", container_id)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{argv} in {image}: exit {result.returncode}\n{output}"
    return output


@pytest.fixture
def host_etcd_version() -> str:
    """The version of the host's etcd, the one the etcd image carries."""
    output = subprocess.run(["/usr/bin/etcd", "--version"], capture_output=True, text=True,
                            check=True).stdout
    match = re.search(r"etcd Version: (\S+)", output)
    assert match, output
    return match.group(1)


def test_kubeadm_names_the_images_that_were_built(kubeadm_images: KubeadmImages) -> None:
    listed = subprocess.run([str(kubeadm_images.bin_dir / "kubeadm"), "config", "images",
                             "list", "--kubernetes-version", kubeadm_images.kubernetes_version],
                            capture_output=True, text=True, check=True).stdout.split()
    assert sorted(kubeadm_images.names) == sorted(n for n in listed if "/coredns:" not in n)


@pytest.mark.parametrize("program", ["kube-apiserver", "kube-controller-manager",
                                     "kube-scheduler"])
def test_a_static_pod_image_runs_its_program_by_name(testbed: Testbed,
                                                     kubeadm_images: KubeadmImages,
                                                     program: str) -> None:
    output = run_in(testbed, kubeadm_images.name(program), program, "--version")
    assert output.strip() == f"Kubernetes {kubeadm_images.kubernetes_version}"


def test_the_kube_proxy_image_runs_the_daemonsets_command(testbed: Testbed,
                                                          kubeadm_images: KubeadmImages
                                                          ) -> None:
    output = run_in(testbed, kubeadm_images.name("kube-proxy"),
                    "/usr/local/bin/kube-proxy", "--version")
    assert output.strip() == f"Kubernetes {kubeadm_images.kubernetes_version}"


def test_the_kube_proxy_image_has_conntrack(testbed: Testbed,
                                            kubeadm_images: KubeadmImages) -> None:
    output = run_in(testbed, kubeadm_images.name("kube-proxy"), "conntrack", "--version")
    assert re.match(r"conntrack v1\.\d+\.\d+", output), output


def test_kube_proxys_iptables_is_nft_on_a_node_with_no_rules(
        testbed: Testbed, kubeadm_images: KubeadmImages) -> None:
    output = run_in(testbed, kubeadm_images.name("kube-proxy"), "sh", "-c",
                    "iptables --version && iptables-save -t filter && ip6tables --version",
                    privileged=True)
    assert re.search(r"^iptables v1\.8\.\d+ \(nf_tables\)$", output, re.M), output
    assert re.search(r"^ip6tables v1\.8\.\d+ \(nf_tables\)$", output, re.M), output


def test_kube_proxys_iptables_follows_a_kubelet_on_legacy_tables(
        testbed: Testbed, kubeadm_images: KubeadmImages) -> None:
    # The kubelet's hint chain in the legacy tables of the (container's own)
    # network namespace: kube-proxy must add its rules beside it, in legacy.
    output = run_in(testbed, kubeadm_images.name("kube-proxy"), "sh", "-c",
                    "xtables-legacy-multi iptables -t mangle -N KUBE-IPTABLES-HINT"
                    " && iptables --version && iptables -t nat -N KUBE-SERVICES"
                    " && xtables-legacy-multi iptables-save -t nat",
                    privileged=True)
    assert re.search(r"^iptables v1\.8\.\d+ \(legacy\)$", output, re.M), output
    assert ":KUBE-SERVICES - [0:0]" in output


def test_the_etcd_image_runs_etcd_by_name(testbed: Testbed, kubeadm_images: KubeadmImages,
                                          host_etcd_version: str) -> None:
    output = run_in(testbed, kubeadm_images.name("etcd"), "etcd", "--version")
    assert f"etcd Version: {host_etcd_version}" in output


def test_the_pause_image_is_the_testbeds_pause(testbed: Testbed,
                                               kubeadm_images: KubeadmImages) -> None:
    assert kubeadm_images.name("pause") == "k8s.gcr.io/pause:3.2"
    output = run_in(testbed, kubeadm_images.name("pause"), "/pause", "-v")
    assert output.strip() == "pause (pykubelet testbed)"
