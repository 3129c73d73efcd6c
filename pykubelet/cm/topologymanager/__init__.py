"""The topology manager (upstream ``pkg/kubelet/cm/topologymanager``): NUMA alignment at admission.

``bitmask`` is a set of NUMA nodes, ``policy`` the four policies' merge of hints
(pure functions), ``scope`` what one admission runs per container or per pod and
the store of chosen hints, ``topology_manager`` the admit handler the kubelet holds.
"""

from pykubelet.cm.topologymanager.bitmask import BitMask
from pykubelet.cm.topologymanager.policy import ANY_NODE_NOT_PREFERRED, TopologyHint
from pykubelet.cm.topologymanager.scope import AffinityStore, HintProvider
from pykubelet.cm.topologymanager.topology_manager import (
    TopologyManager,
    TopologyManagerError,
    new_topology_manager,
)

__all__ = ["ANY_NODE_NOT_PREFERRED", "AffinityStore", "BitMask", "HintProvider",
           "TopologyHint", "TopologyManager", "TopologyManagerError", "new_topology_manager"]
