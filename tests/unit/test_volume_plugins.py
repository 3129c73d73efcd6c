"""Volume plugin logic on a temporary directory: the atomic ``..data`` layout, path checks,
hostPath types, subPath resolution and the ConfigMap/Secret/downwardAPI payloads."""

from __future__ import annotations

import base64
import os
import socket
from pathlib import Path

import pytest
from kubernetes_asyncio.client import (
    V1Container,
    V1DownwardAPIVolumeFile,
    V1KeyToPath,
    V1ObjectFieldSelector,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceFieldSelector,
    V1ResourceRequirements,
)

from pykubelet.api import pod_from_dict
from pykubelet.volumemanager.atomic_writer import (
    DATA_DIR_NAME,
    AtomicWriter,
    FileProjection,
    PathError,
    validate_path,
)
from pykubelet.volumemanager.plugins import (
    VolumeError,
    check_host_path_type,
    configmap_payload,
    downward_payload,
    secret_payload,
    set_volume_ownership,
)


def files(payload: dict[str, bytes], mode: int = 0o644) -> dict[str, FileProjection]:
    return {path: FileProjection(data, mode) for path, data in payload.items()}


def test_atomic_writer_layout_and_swap(tmp_path: Path) -> None:
    writer = AtomicWriter(str(tmp_path))
    assert writer.write(files({"a": b"1", "dir/b": b"2"}))
    first = os.readlink(tmp_path / DATA_DIR_NAME)
    assert first.startswith("..") and (tmp_path / first).is_dir()
    assert os.readlink(tmp_path / "a") == os.path.join(DATA_DIR_NAME, "a")
    assert (tmp_path / "dir" / "b").read_bytes() == b"2"
    # The same payload writes nothing.
    assert not writer.write(files({"a": b"1", "dir/b": b"2"}))
    assert os.readlink(tmp_path / DATA_DIR_NAME) == first
    # A change: a new timestamped directory, the old one gone, a removed key's link gone.
    assert writer.write(files({"a": b"changed"}))
    second = os.readlink(tmp_path / DATA_DIR_NAME)
    assert second != first and not (tmp_path / first).exists()
    assert (tmp_path / "a").read_bytes() == b"changed"
    assert not os.path.lexists(tmp_path / "dir")


def test_atomic_writer_modes(tmp_path: Path) -> None:
    AtomicWriter(str(tmp_path)).write({"key": FileProjection(b"x", 0o400)})
    assert os.stat(tmp_path / "key").st_mode & 0o777 == 0o400


@pytest.mark.parametrize("path,message", [
    ("/etc/passwd", "must be relative path"),
    ("../x", "must not contain '..'"),
    ("a/../../x", "must not contain '..'"),
    ("..hidden", "must not start with '..'"),
    ("", "must not be empty"),
])
def test_payload_paths_that_could_escape_are_refused(tmp_path: Path, path: str,
                                                     message: str) -> None:
    with pytest.raises(PathError, match=message):
        validate_path(path)
    with pytest.raises(PathError):
        AtomicWriter(str(tmp_path / "vol")).write(files({path: b"x"}))
    assert not (tmp_path / "vol").exists()


def test_host_path_type_checks(tmp_path: Path) -> None:
    directory, regular = tmp_path / "d", tmp_path / "f"
    directory.mkdir()
    regular.write_text("x")
    check_host_path_type(str(directory), "Directory")
    check_host_path_type(str(regular), "File")
    with pytest.raises(VolumeError, match=f"^hostPath type check failed: {regular} is not a "
                                          f"directory$"):
        check_host_path_type(str(regular), "Directory")
    with pytest.raises(VolumeError, match=r"is not a file$"):
        check_host_path_type(str(directory), "File")
    with pytest.raises(VolumeError, match=r"is not a socket file$"):
        check_host_path_type(str(regular), "Socket")
    with pytest.raises(VolumeError, match=r"is not a character device$"):
        check_host_path_type(str(regular), "CharDevice")
    with pytest.raises(VolumeError, match=r"is not a block device$"):
        check_host_path_type(str(regular), "BlockDevice")
    check_host_path_type("/dev/null", "CharDevice")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
        check_host_path_type(str(tmp_path / "s"), "Socket")
    with pytest.raises(VolumeError, match=r"is not a directory$"):
        check_host_path_type(str(tmp_path / "missing"), "Directory")
    check_host_path_type(str(tmp_path / "new" / "dir"), "DirectoryOrCreate")
    assert (tmp_path / "new" / "dir").is_dir()
    check_host_path_type(str(tmp_path / "new2" / "file"), "FileOrCreate")
    assert (tmp_path / "new2" / "file").is_file()
    with pytest.raises(VolumeError, match=r"is not a file$"):
        check_host_path_type(str(directory), "FileOrCreate")
    with pytest.raises(VolumeError, match="invalid volume type"):
        check_host_path_type(str(directory), "Dir")
    check_host_path_type(str(tmp_path / "anything"), "")  # no type: no check


def test_configmap_and_secret_payloads_with_items_and_optional_keys() -> None:
    config_map = {"data": {"a": "1", "b": "2"},
                  "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}}
    payload = configmap_payload(config_map, None, 0o644, False)
    assert {k: v.data for k, v in payload.items()} == {"a": b"1", "b": b"2", "bin": b"\x00\x01"}
    items = [V1KeyToPath(key="a", path="sub/renamed", mode=0o600)]
    payload = configmap_payload(config_map, items, 0o644, False)
    assert payload == {"sub/renamed": FileProjection(b"1", 0o600)}
    missing = [V1KeyToPath(key="nope", path="x")]
    with pytest.raises(VolumeError, match="non-existent config key: nope"):
        configmap_payload(config_map, missing, 0o644, False)
    assert configmap_payload(config_map, missing, 0o644, True) == {}
    secret = {"data": {"password": base64.b64encode(b"s3cret").decode()}}
    assert secret_payload(secret, None, 0o400, False) == {
        "password": FileProjection(b"s3cret", 0o400)}
    with pytest.raises(VolumeError, match="non-existent secret key: user"):
        secret_payload(secret, [V1KeyToPath(key="user", path="u")], 0o644, False)
    assert secret_payload(None, None, 0o644, True) == {}


def test_downward_payload() -> None:
    pod = V1Pod(metadata=V1ObjectMeta(name="web", namespace="shop", uid="u-1",
                                      labels={"b": "2", "a": "1"}),
                spec=V1PodSpec(containers=[V1Container(
                    name="c", resources=V1ResourceRequirements(requests={"cpu": "100m"}))]))
    items = [
        V1DownwardAPIVolumeFile(path="labels",
                                field_ref=V1ObjectFieldSelector(field_path="metadata.labels")),
        V1DownwardAPIVolumeFile(path="uid", mode=0o600,
                                field_ref=V1ObjectFieldSelector(field_path="metadata.uid")),
        V1DownwardAPIVolumeFile(path="cpu", resource_field_ref=V1ResourceFieldSelector(
            container_name="c", resource="requests.cpu", divisor="1m")),
        V1DownwardAPIVolumeFile(path="mem", resource_field_ref=V1ResourceFieldSelector(
            container_name="c", resource="limits.memory")),
    ]
    payload = downward_payload(pod, items, 0o644, (2000, 4096))
    assert payload["labels"].data == b'a="1"\nb="2"'
    assert payload["uid"] == FileProjection(b"u-1", 0o600)
    assert payload["cpu"].data == b"100"
    assert payload["mem"].data == b"4096"  # no limit: the node's allocatable
    with pytest.raises(VolumeError, match=r"unsupported fieldPath: spec\.bogus"):
        downward_payload(pod, [V1DownwardAPIVolumeFile(
            path="x", field_ref=V1ObjectFieldSelector(field_path="spec.bogus"))], 0o644, (1, 1))


def test_downward_volume_file_of_a_resource_without_divisor_as_the_api_server_serves_it(
        ) -> None:
    """The API server serves an omitted divisor as "0": the file has the value for 1."""
    def pod_with(divisor: str | None) -> V1Pod:
        ref = {"containerName": "c", "resource": "limits.cpu"}
        if divisor is not None:
            ref["divisor"] = divisor
        return pod_from_dict({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox",
                                "resources": {"limits": {"cpu": "1250m"}}}],
                "volumes": [{"name": "info", "downwardAPI": {"items": [
                    {"path": "cpu_limit", "resourceFieldRef": ref}]}}]}})

    def cpu_file(pod: V1Pod) -> bytes:
        return downward_payload(pod, pod.spec.volumes[0].downward_api.items, 0o644,
                                (2000, 4096))["cpu_limit"].data

    served = pod_with("0")
    assert served.spec.volumes[0].downward_api.items[0].resource_field_ref.divisor == "0"
    assert cpu_file(served) == cpu_file(pod_with("1")) == cpu_file(pod_with(None)) == b"2"


def test_fs_group_ownership(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    AtomicWriter(str(volume)).write({"secret": FileProjection(b"x", 0o400),
                                     "sub/f": FileProjection(b"y", 0o600)})
    set_volume_ownership(str(volume), 2000, read_only=True)
    data = volume / os.readlink(volume / DATA_DIR_NAME)
    for path in (volume, data, data / "sub"):
        info = os.stat(path)
        assert info.st_gid == 2000 and info.st_mode & 0o2050 == 0o2050  # setgid, g+rx
    assert os.stat(volume / "secret").st_mode & 0o777 == 0o440  # through the link
    assert os.stat(data / "sub" / "f").st_mode & 0o777 == 0o640
    assert os.lstat(volume / "secret").st_gid == 2000  # the link itself re-owned
    # Unchanged content is not rewritten although the modes gained group bits.
    assert not AtomicWriter(str(volume)).write({"secret": FileProjection(b"x", 0o400),
                                                "sub/f": FileProjection(b"y", 0o600)})
    writable = tmp_path / "empty"
    writable.mkdir()
    (writable / "f").write_text("z")
    os.chmod(writable / "f", 0o600)
    set_volume_ownership(str(writable), 2000, read_only=False)
    assert os.stat(writable / "f").st_mode & 0o777 == 0o660
