"""The kubelet's copies of the ConfigMaps and Secrets its pods use (upstream ``util/manager``).

Pods read ConfigMaps and Secrets through their volumes and their environment.
Upstream's ``configmap`` and ``secret`` managers keep a per-pod reference
count of the objects each pod names (``register_pod`` / ``unregister_pod``,
idempotent: a pod registered again replaces its previous references) and
serve ``get_object`` by one of the three ``configMapAndSecretChangeDetectionStrategy``
values:

- ``Watch`` (default, ``WatchingStore``): one list+watch per referenced object
  (``fieldSelector=metadata.name=<name>``, which the Node authorizer allows),
  started on the first reference and stopped on the last;
- ``Cache`` (``ObjectStore``, seed 004): a GET when the cached copy is older
  than its TTL, the TTL read from the Node's ``node.alpha.kubernetes.io/ttl``
  annotation when present; a failed refresh serves the last good copy;
- ``Get`` (``DirectStore``): a GET for every read.

Immutable objects (``immutable: true``) are fetched once and then served
from memory: a watch on one is stopped, a cached one never expires.

Objects are plain JSON dictionaries as the API server sends them; a missing
object raises ``NotFoundError`` (``configmap "name" not found``, upstream's
message, which the FailedMount event quotes).
"""

from __future__ import annotations

from pykubelet.objectcache.manager import (
    CACHE,
    GET,
    WATCH,
    DirectStore,
    Manager,
    NotFoundError,
    ObjectStore,
    WatchingStore,
    configmap_names,
    new_configmap_manager,
    new_secret_manager,
    secret_names,
    ttl_from_node,
)

__all__ = ["CACHE", "GET", "WATCH", "DirectStore", "Manager", "NotFoundError", "ObjectStore",
           "WatchingStore", "configmap_names", "new_configmap_manager", "new_secret_manager",
           "secret_names", "ttl_from_node"]
