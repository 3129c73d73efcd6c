"""The images build-images.sh --kubeadm makes are the ones kubeadm v1.20 asks for.

kubeadm's static-pod manifests and kube-proxy add-on name their images; a
node without one of them would try to pull it from a registry this machine
cannot reach. The names are read from both sides, the built kubeadm's own
list and build-images.sh's, so that neither can drift from the other.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testsupport.controlplane import ControlPlaneError, kubeadm_binary
from testsupport.testbed import SCRIPTS_DIR

BUILD_IMAGES = SCRIPTS_DIR / "build-images.sh"
KUBERNETES_VERSION = "v1.20.2"
# The one image left out: the DNS add-on, whose place the testbed's DNS
# stand-in takes (kubeadm init --skip-phases=addon/coredns).
NOT_BUILT = {"k8s.gcr.io/coredns:1.7.0"}


def images_build_images_makes(bin_dir: Path) -> list[str]:
    result = subprocess.run([str(BUILD_IMAGES), "--list-kubeadm", str(bin_dir)],
                            capture_output=True, text=True, check=True, timeout=30)
    return result.stdout.split()


def images_kubeadm_names(kubeadm: Path) -> list[str]:
    result = subprocess.run([str(kubeadm), "config", "images", "list",
                             "--kubernetes-version", KUBERNETES_VERSION],
                            capture_output=True, text=True, check=True, timeout=60)
    return result.stdout.split()


@pytest.fixture
def kubeadm() -> Path:
    try:
        return kubeadm_binary()
    except ControlPlaneError as err:
        pytest.skip(f"kubeadm is not built here: {err}")


def test_every_image_kubeadm_names_is_built_except_coredns(kubeadm: Path) -> None:
    wanted = set(images_kubeadm_names(kubeadm))
    built = images_build_images_makes(kubeadm.parent)
    assert NOT_BUILT.issubset(wanted)
    assert sorted(built) == sorted(wanted - NOT_BUILT)


def test_the_control_plane_images_carry_the_caches_version(tmp_path: Path) -> None:
    (tmp_path / "version").write_text("Kubernetes v1.99.3\n")
    built = images_build_images_makes(tmp_path)
    assert "k8s.gcr.io/kube-apiserver:v1.99.3" in built
    assert "k8s.gcr.io/kube-proxy:v1.99.3" in built
    # etcd and pause are the tags kubeadm 1.20 pins, whatever the cache.
    assert "k8s.gcr.io/etcd:3.4.13-0" in built
    assert "k8s.gcr.io/pause:3.2" in built


def test_a_cache_without_a_version_is_refused(tmp_path: Path) -> None:
    result = subprocess.run([str(BUILD_IMAGES), "--list-kubeadm", str(tmp_path)],
                            capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode != 0
    assert str(tmp_path / "version") in result.stderr
