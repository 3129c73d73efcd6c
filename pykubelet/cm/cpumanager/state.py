"""The CPU manager's checkpoint, ``<root-dir>/cpu_manager_state``, in upstream's v2 shape.

The file is upstream's (``state/checkpoint.go``), so a node can move between this
kubelet and the Go one: ``{"policyName", "defaultCpuSet", "entries": {pod UID:
{container name: cpuset}}, "checksum"}``, ``entries`` left out when empty, compact
JSON. The checksum is upstream's ``checkpointmanager/checksum``: FNV-32a over the
go-spew ``%#v`` rendering of the checkpoint struct (sorted map keys, checksum field
0), reproduced by ``checksum`` and checked against upstream's own test vectors. A
checksum of 0 is accepted unverified, as upstream accepts it. Reading and the
atomic, flushed write are ``pykubelet.cm.checkpoint``'s, shared with the device
manager's checkpoint.

A file that cannot be read back, or was written by another policy, stops the
kubelet with upstream's message: the node must be drained and the file deleted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pykubelet.cm.checkpoint import read_checkpoint, write_checkpoint
from pykubelet.cm.cpumanager import cpuset
from pykubelet.cm.cpumanager.cpuset import CPUSet, CPUSetError
from pykubelet.util.gospew import go_spew_checksum

CHECKPOINT_NAME = "cpu_manager_state"

# Upstream's checkpoint struct and field types as go-spew names them.
_SPEW_TYPE = "*state.CPUManagerCheckpoint"


class StateError(Exception):
    """The checkpoint cannot be restored; the kubelet must not start."""


def checksum(policy_name: str, default_cpu_set: str,
             entries: dict[str, dict[str, str]]) -> int:
    """Upstream's checksum of a v2 checkpoint (with its checksum field at 0)."""
    rendered_entries = " ".join(
        f"{pod}:map[" + " ".join(f"{name}:{cpus}" for name, cpus in sorted(containers.items()))
        + "]" for pod, containers in sorted(entries.items()))
    text = (f"({_SPEW_TYPE}){{PolicyName:(string){policy_name} "
            f"DefaultCPUSet:(string){default_cpu_set} "
            f"Entries:(map[string]map[string]string)map[{rendered_entries}] "
            f"Checksum:(checksum.Checksum)0}}")
    return go_spew_checksum(text)


def _field(data: dict[str, object], name: str, default: object) -> object:
    """A key as Go's JSON decoder finds it: exact, else ignoring case (upstream's own test
    files spell ``defaultCPUSet``)."""
    if name in data:
        return data[name]
    return next((value for key, value in data.items() if key.lower() == name.lower()),
                default)


@dataclass
class CPUState:
    """The shared pool and the exclusive assignments; ``store`` writes them out."""

    path: str
    policy_name: str
    default_cpu_set: CPUSet = frozenset()
    assignments: dict[str, dict[str, CPUSet]] = field(default_factory=dict)

    def cpu_set(self, pod_uid: str, container: str) -> CPUSet | None:
        return self.assignments.get(pod_uid, {}).get(container)

    def cpu_set_or_default(self, pod_uid: str, container: str) -> CPUSet:
        assigned = self.cpu_set(pod_uid, container)
        return self.default_cpu_set if assigned is None else assigned

    def set_cpu_set(self, pod_uid: str, container: str, cpus: CPUSet) -> None:
        self.assignments.setdefault(pod_uid, {})[container] = cpus
        self.store()

    def set_default_cpu_set(self, cpus: CPUSet) -> None:
        self.default_cpu_set = cpus
        self.store()

    def delete(self, pod_uid: str, container: str) -> None:
        containers = self.assignments.get(pod_uid, {})
        containers.pop(container, None)
        if not containers:
            self.assignments.pop(pod_uid, None)
        self.store()

    def restore(self) -> None:
        """Read the checkpoint, or write a fresh one when there is none."""
        try:
            blob = read_checkpoint(self.path)
        except OSError as err:
            raise self._restore_error(str(err)) from err
        if blob is None:
            self.store()
            return
        try:
            self._load(blob)
        except (ValueError, CPUSetError) as err:
            raise self._restore_error(str(err)) from err

    def _restore_error(self, problem: str) -> StateError:
        return StateError(f"could not restore state from checkpoint: {problem}, please drain "
                          f"this node and delete the CPU manager checkpoint file "
                          f'"{self.path}" before restarting Kubelet')

    def _load(self, blob: bytes) -> None:
        try:
            data = json.loads(blob)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ValueError("checkpoint is corrupted")
        policy = _field(data, "policyName", "")
        default = _field(data, "defaultCpuSet", "")
        entries = _field(data, "entries", None) or {}
        stored = _field(data, "checksum", 0)
        if not (isinstance(policy, str) and isinstance(default, str)
                and isinstance(entries, dict) and isinstance(stored, int)
                and all(isinstance(c, dict) and all(isinstance(v, str) for v in c.values())
                        for c in entries.values())):
            raise ValueError("checkpoint is corrupted")
        if stored != 0 and stored != checksum(policy, default, entries):
            raise ValueError("checkpoint is corrupted")
        if policy != self.policy_name:
            raise ValueError(f'configured policy "{self.policy_name}" differs from state '
                             f'checkpoint policy "{policy}"')
        try:
            default_cpus = cpuset.parse(default)
        except CPUSetError as err:
            raise ValueError(f'could not parse default cpu set "{default}": {err}') from err
        assignments: dict[str, dict[str, CPUSet]] = {}
        for pod, containers in entries.items():
            for name, text in containers.items():
                try:
                    assignments.setdefault(pod, {})[name] = cpuset.parse(text)
                except CPUSetError as err:
                    raise ValueError(f'could not parse cpuset "{text}" for container '
                                     f'"{name}" in pod "{pod}": {err}') from err
        self.default_cpu_set = default_cpus
        self.assignments = assignments

    def store(self) -> None:
        """Write the checkpoint whole: a crash leaves the old file or the new one."""
        default = cpuset.format(self.default_cpu_set)
        entries = {pod: {name: cpuset.format(cpus) for name, cpus in sorted(containers.items())}
                   for pod, containers in sorted(self.assignments.items())}
        document: dict[str, object] = {"policyName": self.policy_name, "defaultCpuSet": default}
        if entries:
            document["entries"] = entries
        document["checksum"] = checksum(self.policy_name, default, entries)
        write_checkpoint(self.path, json.dumps(document, separators=(",", ":")).encode())
