"""The device manager's checkpoint, ``kubelet_internal_checkpoint`` (upstream
``devicemanager/checkpoint/checkpoint.go`` and ``checkpointmanager``).

The file sits beside the registration socket, in upstream's JSON shape, so that
tools reading it (and an upstream kubelet started on the same node) understand it::

    {"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName",
                                    "DeviceIDs": {"<NUMA node>": [ids]},
                                    "AllocResp": "<base64 ContainerAllocateResponse>"}],
              "RegisteredDevices": {"<resource>": [ids]}},
     "Checksum": <uint32>}

``PodDeviceEntries`` is ``null`` when empty, as Go's encoder writes a nil slice.
The checksum is upstream's: FNV-32a over the go-spew ``%#v`` rendering of the
``Data`` struct (map keys sorted, byte slices as decimal numbers), reproduced by
``checksum`` and checked against checkpoints written by upstream kubelets. A file
whose checksum does not match is refused (upstream's ``ErrCorruptCheckpoint``).
Reading and the atomic, flushed write are ``pykubelet.cm.checkpoint``'s, shared
with the CPU manager's checkpoint.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pykubelet.cm.checkpoint import read_checkpoint, write_checkpoint
from pykubelet.util.gospew import go_spew_checksum

CHECKPOINT_NAME = "kubelet_internal_checkpoint"
# Devices without topology are recorded under this NUMA node (upstream nodeWithoutTopology).
NODE_WITHOUT_TOPOLOGY = -1


class CheckpointError(Exception):
    """The checkpoint exists but cannot be used (unreadable, malformed, corrupt)."""


@dataclass(frozen=True)
class PodDevicesEntry:
    pod_uid: str
    container_name: str
    resource_name: str
    # NUMA node -> device ids (upstream DevicesPerNUMA).
    device_ids: Mapping[int, Sequence[str]]
    # The plugin's ContainerAllocateResponse, serialized.
    alloc_resp: bytes


@dataclass(frozen=True)
class CheckpointData:
    entries: list[PodDevicesEntry]
    registered: dict[str, list[str]]


def _spew_list(items: Sequence[str]) -> str:
    return "[" + " ".join(items) + "]"


def checksum(data: CheckpointData) -> int:
    """Upstream's checksum of ``checkpointData`` (go-spew ``%#v``, then FNV-32a)."""
    if data.entries:
        rendered = []
        for e in data.entries:
            numa = " ".join(f"{node}:{_spew_list(ids)}"
                            for node, ids in sorted(e.device_ids.items()))
            resp = " ".join(str(b) for b in e.alloc_resp)
            rendered.append(
                f"{{PodUID:(string){e.pod_uid} ContainerName:(string){e.container_name} "
                f"ResourceName:(string){e.resource_name} "
                f"DeviceIDs:(checkpoint.DevicesPerNUMA)map[{numa}] "
                f"AllocResp:([]uint8)[{resp}]}}")
        entries = "[" + " ".join(rendered) + "]"
    else:
        entries = "<nil>"
    registered = " ".join(f"{name}:{_spew_list(ids)}"
                          for name, ids in sorted(data.registered.items()))
    text = ("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"
            f"{entries} RegisteredDevices:(map[string][]string)map[{registered}]}}")
    return go_spew_checksum(text)


def encode(data: CheckpointData) -> bytes:
    entries = [{"PodUID": e.pod_uid, "ContainerName": e.container_name,
                "ResourceName": e.resource_name,
                "DeviceIDs": {str(node): list(ids) for node, ids in sorted(e.device_ids.items())},
                "AllocResp": base64.b64encode(e.alloc_resp).decode()}
               for e in data.entries]
    document = {"Data": {"PodDeviceEntries": entries or None,
                         "RegisteredDevices": {k: list(v) for k, v in data.registered.items()}},
                "Checksum": checksum(data)}
    return json.dumps(document, separators=(",", ":")).encode()


def _field(obj: Mapping[str, object], name: str) -> object:
    # Go's decoder matches keys case-insensitively.
    if name in obj:
        return obj[name]
    return next((v for k, v in obj.items() if k.lower() == name.lower()), None)


def decode(blob: bytes, path: str) -> CheckpointData:
    try:
        document = json.loads(blob)
        body = _field(document, "Data") or {}
        assert isinstance(body, dict)
        entries: list[PodDevicesEntry] = []
        raw_entries = _field(body, "PodDeviceEntries") or []
        assert isinstance(raw_entries, list)
        for raw in raw_entries:
            assert isinstance(raw, dict)
            ids = _field(raw, "DeviceIDs") or {}
            assert isinstance(ids, dict)
            entries.append(PodDevicesEntry(
                pod_uid=str(_field(raw, "PodUID") or ""),
                container_name=str(_field(raw, "ContainerName") or ""),
                resource_name=str(_field(raw, "ResourceName") or ""),
                device_ids={int(node): [str(d) for d in devs or []] for node, devs in ids.items()},
                alloc_resp=base64.b64decode(str(_field(raw, "AllocResp") or ""), validate=True)))
        registered_raw = _field(body, "RegisteredDevices") or {}
        assert isinstance(registered_raw, dict)
        registered = {str(k): [str(d) for d in v or []] for k, v in registered_raw.items()}
        stored = _field(document, "Checksum")
    except (ValueError, TypeError, AssertionError, AttributeError, binascii.Error) as err:
        raise CheckpointError(f"checkpoint {path} is malformed: {err}") from err
    data = CheckpointData(entries, registered)
    if stored != checksum(data):
        # Upstream's errors.ErrCorruptCheckpoint.
        raise CheckpointError(f"checkpoint {path} is corrupted")
    return data


def read(path: str) -> CheckpointData | None:
    """The checkpoint at ``path``; None when there is none."""
    try:
        blob = read_checkpoint(path)
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from err
    return decode(blob, path) if blob is not None else None


def write(path: str, data: CheckpointData) -> None:
    """Replace the checkpoint atomically (a crash leaves the old or the new one)."""
    write_checkpoint(path, encode(data))


__all__ = ["CHECKPOINT_NAME", "NODE_WITHOUT_TOPOLOGY", "CheckpointData", "CheckpointError",
           "PodDevicesEntry", "checksum", "decode", "encode", "read", "write"]
