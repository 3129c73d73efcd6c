"""What a container is given for its devices (upstream ``DeviceRunContainerOptions``).

Device plugins answer ``Allocate`` with environment variables, bind mounts,
device nodes and annotations for the container (and CDI device names). The
device manager merges the answers for every resource a container holds into one
``DeviceRunOptions``; the runtime manager adds them to the CRI container config
beside what the pod spec asks for. This module is the vocabulary between the
two, so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DeviceMount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceSpec:
    container_path: str
    host_path: str
    # cgroup device access: some of "r", "w", "m".
    permissions: str = ""


@dataclass(frozen=True)
class DeviceRunOptions:
    """Each list in the order the plugins gave it; names (env, annotation) and container
    paths (mount, device) are unique, the first plugin's answer winning."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[DeviceMount] = field(default_factory=list)
    devices: list[DeviceSpec] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.envs or self.mounts or self.devices or self.annotations
                    or self.cdi_devices)


NO_DEVICES = DeviceRunOptions()

__all__ = ["NO_DEVICES", "DeviceMount", "DeviceRunOptions", "DeviceSpec"]
