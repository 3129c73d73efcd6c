"""Pod volumes in standalone mode, on real containerd: what the container sees, and clean-up.

emptyDir (disk and ``medium: Memory``), hostPath with its ``type`` checks,
downwardAPI files and ``subPath``/``subPathExpr`` need no API server. Each
test reads what the container printed into its log (as ``kubectl logs``
would show it) and checks the node afterwards: the pod's directory and its
tmpfs mounts are gone once the pod is, also after a kubelet restart.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from testsupport.kubelet_process import (
    KubeletProcess,
    busybox_pod,
    remove_everything,
)
from testsupport.testbed import Testbed

pytestmark = pytest.mark.containerd


def container_log(kubelet: KubeletProcess, name: str, container: str, *,
                  every_start: bool = False) -> str:
    """The container's output (the CRI log lines' content), as ``kubectl logs`` shows it:
    of its first start, or of every start in turn (a log file ``N.log`` per start)."""
    pod = kubelet.pod(name)
    if pod is None:
        return ""
    meta = pod["metadata"]
    directory = (kubelet.logs_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
                 / container)
    starts = sorted(directory.glob("*.log"), key=lambda path: int(path.stem))
    lines = []
    for path in starts if every_start else [directory / "0.log"]:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4:
                lines.append(parts[3])
    return "\n".join(lines)


def wait_log(kubelet: KubeletProcess, name: str, container: str, marker: str,
             timeout: float = 60) -> str:
    return str(kubelet.wait_for(
        lambda: marker in (text := container_log(kubelet, name, container)) and text,
        timeout, f"{marker!r} in the log of {name}/{container}"))


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` on the node (what ``findmnt`` would list)."""
    prefix = str(path.resolve())
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = line.split()[4]
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return found


def script(name: str, text: str) -> dict[str, Any]:
    return {"name": name, "command": ["sh", "-c", text + "\necho DONE\nsleep 3600"]}


def test_empty_dir_on_disk_and_in_memory_then_cleaned_up(kubelet: KubeletProcess,
                                                         testbed: Testbed) -> None:
    pod = busybox_pod(
        "scratch",
        [{**script("app", "cat /scratch/hello; grep ' /ram ' /proc/mounts; "
                          "echo data > /ram/f && echo ram-writable"),
          "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"},
                           {"name": "ram", "mountPath": "/ram"}]}],
        testbed.busybox_image,
        initContainers=[{"name": "init", "command": ["sh", "-c", "echo from-init > /s/hello"],
                         "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}],
        volumes=[{"name": "scratch", "emptyDir": {}},
                 {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}],
        terminationGracePeriodSeconds=1)
    manifest = kubelet.write_pod(pod)
    text = wait_log(kubelet, "scratch", "app", "DONE")
    # The init container's file is there for the app: the emptyDir is the pod's.
    assert "from-init" in text
    # Memory medium: a tmpfs of the size limit (16 MiB = 16384k), writable.
    ram_line = next(line for line in text.splitlines() if " /ram " in line)
    assert ram_line.startswith("tmpfs /ram tmpfs ") and "size=16384k" in ram_line
    assert "ram-writable" in text
    uid = kubelet.pod("scratch")["metadata"]["uid"]  # type: ignore[index]
    pod_dir = kubelet.root / "pods" / uid
    assert (pod_dir / "volumes" / "kubernetes.io~empty-dir" / "scratch" / "hello").is_file()
    assert mounts_under(pod_dir)  # the tmpfs is mounted on the node

    manifest.unlink()
    kubelet.wait_for(lambda: not pod_dir.exists() and not mounts_under(pod_dir), 60,
                     "pod directory and its tmpfs removed")


def test_host_path_types_and_upstream_messages(kubelet: KubeletProcess, testbed: Testbed,
                                               tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "note").write_text("from-the-node\n")
    made = tmp_path / "made" / "dir"
    made_file = tmp_path / "made" / "file"
    pod = busybox_pod(
        "hostpath",
        [{**script("app", "cat /shared/note; echo written > /made/x; ls -ld /made-file"),
          "volumeMounts": [{"name": "shared", "mountPath": "/shared", "readOnly": True},
                           {"name": "made", "mountPath": "/made"},
                           {"name": "made-file", "mountPath": "/made-file"}]}],
        testbed.busybox_image,
        volumes=[{"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}},
                 {"name": "made", "hostPath": {"path": str(made), "type": "DirectoryOrCreate"}},
                 {"name": "made-file",
                  "hostPath": {"path": str(made_file), "type": "FileOrCreate"}}],
        terminationGracePeriodSeconds=1)
    kubelet.write_pod(pod)
    text = wait_log(kubelet, "hostpath", "app", "DONE")
    assert "from-the-node" in text
    # DirectoryOrCreate made the directory on the node; the container wrote into it.
    assert (made / "x").read_text() == "written\n"
    assert made_file.is_file()

    # A type that does not match: upstream's message, and the pod does not start.
    wrong = busybox_pod(
        "wrongtype",
        [{**script("app", "true"), "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
        testbed.busybox_image,
        volumes=[{"name": "v", "hostPath": {"path": str(shared), "type": "File"}},
                 {"name": "s", "hostPath": {"path": str(shared / "note"),
                                            "type": "Socket"}}])
    kubelet.write_pod(wrong)
    events = kubelet.wait_for(lambda: len(kubelet.events("FailedMount")) >= 2 and
                              kubelet.events("FailedMount"), 60, "FailedMount events")
    joined = "\n".join(events)
    assert f"hostPath type check failed: {shared} is not a file" in joined
    assert f"hostPath type check failed: {shared / 'note'} is not a socket file" in joined
    status = kubelet.status("wrongtype")
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    # The node's own files are never removed with the pod.
    (kubelet.manifests / "hostpath.yaml").unlink()
    kubelet.wait_for(lambda: kubelet.pod("hostpath") is None, 60, "hostpath pod gone")
    assert (shared / "note").read_text() == "from-the-node\n"


def test_downward_api_volume_files(kubelet: KubeletProcess, testbed: Testbed) -> None:
    pod = busybox_pod(
        "downward",
        [{**script("app", "for f in name ns labels tier mem cpu node-mem; do "
                          "echo \"$f=$(cat /info/$f)\"; done; ls -la /info"),
          "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}},
          "volumeMounts": [{"name": "info", "mountPath": "/info"}]}],
        testbed.busybox_image,
        volumes=[{"name": "info", "downwardAPI": {"items": [
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "tier", "fieldRef": {"fieldPath": "metadata.labels['tier']"}},
            {"path": "mem", "resourceFieldRef": {"containerName": "app",
                                                 "resource": "limits.memory",
                                                 "divisor": "1Mi"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "app",
                                                 "resource": "limits.cpu", "divisor": "1m"}},
            {"path": "node-mem", "resourceFieldRef": {"containerName": "bare",
                                                      "resource": "limits.memory",
                                                      "divisor": "1Mi"}},
        ]}}],
        initContainers=[{"name": "bare", "command": ["true"]}])
    pod["metadata"]["labels"] = {"tier": "web", "app": "shop"}
    kubelet.write_pod(pod)
    text = wait_log(kubelet, "downward", "app", "DONE")
    assert "name=downward-e2e-node" in text
    assert "ns=default" in text
    assert 'labels=app="shop"' in text and 'tier="web"' in text
    assert "tier=web" in text
    assert "mem=64" in text
    assert "cpu=250" in text
    # No memory limit: the node's allocatable (the machine less the eviction threshold).
    with open("/proc/meminfo", encoding="utf-8") as meminfo:
        total_mi = int(meminfo.readline().split()[1]) // 1024
    node_mem = int(next(line for line in text.splitlines()
                        if line.startswith("node-mem=")).split("=")[1])
    assert total_mi - 1024 < node_mem < total_mi
    # Upstream's atomic layout: the files are links into ..data.
    assert "..data" in text


def test_resource_refs_with_the_zero_divisor_the_api_server_stores_start_the_pod(
        kubelet: KubeletProcess, testbed: Testbed) -> None:
    """The API server stores an omitted ``divisor`` as "0": env and files read it as 1."""
    def ref(resource: str, container: str | None = None) -> dict[str, Any]:
        found = {"resource": resource, "divisor": "0"}
        return {**found, "containerName": container} if container else found

    pod = busybox_pod(
        "zerodiv",
        [{**script("app", "echo CPU_LIMIT=$CPU_LIMIT MEM_REQUEST=$MEM_REQUEST "
                          "NODE_CPU=$NODE_CPU; "
                          "echo FILE_CPU=$(cat /info/cpu) FILE_MEM=$(cat /info/mem)"),
          "resources": {"limits": {"cpu": "1500m", "memory": "64Mi"},
                        "requests": {"cpu": "250m", "memory": "32Mi"}},
          "env": [{"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": ref("limits.cpu")}},
                  {"name": "MEM_REQUEST",
                   "valueFrom": {"resourceFieldRef": ref("requests.memory")}},
                  {"name": "NODE_CPU",
                   "valueFrom": {"resourceFieldRef": ref("limits.cpu", "bare")}}],
          "volumeMounts": [{"name": "info", "mountPath": "/info"}]}],
        testbed.busybox_image,
        volumes=[{"name": "info", "downwardAPI": {"items": [
            {"path": "cpu", "resourceFieldRef": ref("limits.cpu", "app")},
            {"path": "mem", "resourceFieldRef": ref("limits.memory", "app")}]}}],
        initContainers=[{"name": "bare", "command": ["true"]}])
    kubelet.write_pod(pod)
    text = wait_log(kubelet, "zerodiv", "app", "DONE")
    values = dict(item.split("=", 1) for line in text.splitlines()
                  for item in line.split() if "=" in item)
    assert values["CPU_LIMIT"] == "2"  # 1.5 cores, rounded up
    assert values["MEM_REQUEST"] == str(32 * 2**20)
    assert int(values["NODE_CPU"]) >= 1  # no limit: the node's allocatable cores
    assert (values["FILE_CPU"], values["FILE_MEM"]) == ("2", str(64 * 2**20))


def test_sub_path_and_sub_path_expr_and_traversal_refused(kubelet: KubeletProcess,
                                                          testbed: Testbed) -> None:
    pod = busybox_pod(
        "subpath",
        [{**script("app", "echo one > /one/f; echo mine > /mine/f; ls /whole; "
                          "cat /whole/$POD_NAME/f"),
          "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef":
                                                      {"fieldPath": "metadata.name"}}}],
          "volumeMounts": [{"name": "data", "mountPath": "/one", "subPath": "a/b"},
                           {"name": "data", "mountPath": "/mine",
                            "subPathExpr": "$(POD_NAME)"},
                           {"name": "data", "mountPath": "/whole"}]}],
        testbed.busybox_image, volumes=[{"name": "data", "emptyDir": {}}])
    kubelet.write_pod(pod)
    text = wait_log(kubelet, "subpath", "app", "DONE")
    assert "subpath-e2e-node" in text.split()  # the directory subPathExpr made
    assert "mine" in text.splitlines()
    uid = kubelet.pod("subpath")["metadata"]["uid"]  # type: ignore[index]
    data = kubelet.root / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "data"
    assert (data / "a" / "b" / "f").read_text() == "one\n"
    # Each subPath is the kubelet's own bind mount, which goes with the pod.
    pod_dir = kubelet.root / "pods" / uid
    subpaths = pod_dir / "volume-subpaths" / "data" / "app"
    assert sorted(mounts_under(subpaths)) == [str(subpaths.resolve() / "0"),
                                              str(subpaths.resolve() / "1")]
    (kubelet.manifests / "subpath.yaml").unlink()
    kubelet.wait_for(lambda: not pod_dir.exists() and not mounts_under(pod_dir), 60,
                     "the subPath mounts and the directory of the removed pod cleaned up")

    escape = busybox_pod(
        "escape",
        [{**script("app", "ls /x"),
          "volumeMounts": [{"name": "data", "mountPath": "/x", "subPath": "../../.."}]}],
        testbed.busybox_image, volumes=[{"name": "data", "emptyDir": {}}])
    kubelet.write_pod(escape)
    waiting = kubelet.wait_for(
        lambda: (s := kubelet.container_status("escape", "app")).get("state", {})
        .get("waiting", {}).get("reason") == "CreateContainerConfigError" and s, 60,
        "CreateContainerConfigError")
    assert "must not contain '..'" in waiting["state"]["waiting"]["message"]


def test_volumes_of_a_pod_removed_while_the_kubelet_was_down_are_cleaned(
        testbed: Testbed, tmp_path: Path) -> None:
    first = KubeletProcess(tmp_path, testbed.endpoint)
    first.start()
    try:
        manifest = first.write_pod(busybox_pod(
            "leftover",
            [{**script("app", "echo x > /ram/f; echo y > /sub/f"),
              "volumeMounts": [{"name": "ram", "mountPath": "/ram"},
                               {"name": "ram", "mountPath": "/sub", "subPath": "sub"}]}],
            testbed.busybox_image, volumes=[{"name": "ram", "emptyDir": {"medium": "Memory"}}],
            terminationGracePeriodSeconds=1))
        wait_log(first, "leftover", "app", "DONE")
        uid = first.pod("leftover")["metadata"]["uid"]  # type: ignore[index]
        pod_dir = first.root / "pods" / uid
        assert len(mounts_under(pod_dir)) == 2  # the tmpfs and the subPath's bind mount
        first.stop(signal.SIGKILL)
        manifest.unlink()
        second = KubeletProcess(tmp_path, testbed.endpoint,
                                ports=(first.read_only_port, first.healthz_port))
        second.start()
        try:
            second.wait_for(lambda: not pod_dir.exists() and not mounts_under(pod_dir), 90,
                            "the volumes and directory of the removed pod cleaned up")
        finally:
            second.stop()
    finally:
        first.stop()
        remove_everything(testbed.endpoint)


RACE_PODS = 6
RACE_SECONDS = 12


def test_sub_path_swapped_for_a_symlink_never_exposes_a_host_directory(
        kubelet: KubeletProcess, testbed: Testbed, tmp_path: Path) -> None:
    """The CVE-2021-25741 race: a container turns the subPath directory into a symlink to a
    host directory, over and over, while the kubelet starts a second container mounting it.

    Checking the path and then handing the runtime the path string lets the runtime follow
    the symlink made in between; each pod here is one try, all at once.
    """
    host_dir = tmp_path / "hostsecret"
    host_dir.mkdir()
    (host_dir / "secret.txt").write_text("HOST-SECRET\n")
    # Renames, so that x is nearly always there: a real directory or the symlink.
    flip = (f"ln -s {host_dir} /data/link; mkdir /data/x\n"
            f"end=$(( $(date +%s) + {RACE_SECONDS} ))\n"
            'while [ "$(date +%s)" -lt "$end" ]; do\n'
            "  mv /data/x /data/dir; mv /data/link /data/x\n"
            "  mv /data/x /data/link; mv /data/dir /data/x\n"
            "done\n")
    read = ("if cat /mnt/secret.txt; then echo LEAKED; else echo SAFE; fi; "
            "ls -la /mnt")
    names = [f"race-{index}" for index in range(RACE_PODS)]
    for name in names:
        kubelet.write_pod(busybox_pod(
            name,
            [{**script("flipper", flip),
              "volumeMounts": [{"name": "data", "mountPath": "/data"}],
              # The reader starts after this hook returns: once the flipping has begun.
              "lifecycle": {"postStart": {"exec": {"command": [
                  "sh", "-c", "until [ -L /data/link ]; do sleep 0.1; done; sleep 1"]}}}},
             {**script("reader", read),
              "volumeMounts": [{"name": "data", "mountPath": "/mnt", "subPath": "x"}]}],
            testbed.busybox_image, volumes=[{"name": "data", "emptyDir": {}}],
            terminationGracePeriodSeconds=1))
    # Each reader starts in the end: once the flipper stops, x stays a directory.
    logs = {name: kubelet.wait_for(lambda name=name: "DONE" in (text := container_log(
        kubelet, name, "reader", every_start=True)) and text, 120, f"the reader of {name} done")
        for name in names}
    leaked = sorted(name for name, text in logs.items() if "HOST-SECRET" in text)
    assert not leaked, f"host file read through the subPath in {leaked}: {logs}"
    assert all("SAFE" in text for text in logs.values())
