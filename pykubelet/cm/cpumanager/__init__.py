"""The CPU manager (upstream ``pkg/kubelet/cm/cpumanager``): exclusive CPUs for Guaranteed pods.

``cpuset`` is the Linux list syntax, ``topology`` the machine's CPUs (cores,
sockets, NUMA nodes) and how to pick some, ``state`` the ``cpu_manager_state``
checkpoint, ``policy_static`` the ``static`` policy and ``cpu_manager`` what the
kubelet holds: a hint provider of the topology manager (hints, allocation), the
cpuset a new container gets, and the loop that moves running containers onto the
shared pool as it changes.
"""

from pykubelet.cm.cpumanager.cpu_manager import CPUManager, new_cpu_manager

__all__ = ["CPUManager", "new_cpu_manager"]
