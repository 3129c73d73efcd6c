"""Registry credentials for image pulls (upstream ``pkg/credentialprovider``).

``keyring`` files credentials by registry location and finds the ones an
image's repository matches, as upstream's Docker keyring does; ``secrets``
builds such a keyring from a pod's ``imagePullSecrets``; ``plugin`` runs the
exec plugins of ``--image-credential-provider-config``. The image manager
(``pykubelet.kuberuntime.images``) offers each match to the runtime in turn,
the pull secrets' first.
"""

from pykubelet.credentialprovider.keyring import (
    DEFAULT_REGISTRY_HOST,
    AuthConfig,
    DockerKeyring,
    is_default_registry_match,
    registry_key,
    urls_match,
)
from pykubelet.credentialprovider.secrets import (
    DOCKER_CONFIG_JSON_KEY,
    DOCKERCFG_KEY,
    SECRET_TYPE_DOCKER_CONFIG_JSON,
    SECRET_TYPE_DOCKERCFG,
    PullSecretError,
    decode_auth_field,
    make_docker_keyring,
)

__all__ = [
    "DEFAULT_REGISTRY_HOST",
    "DOCKERCFG_KEY",
    "DOCKER_CONFIG_JSON_KEY",
    "SECRET_TYPE_DOCKERCFG",
    "SECRET_TYPE_DOCKER_CONFIG_JSON",
    "AuthConfig",
    "DockerKeyring",
    "PullSecretError",
    "decode_auth_field",
    "is_default_registry_match",
    "make_docker_keyring",
    "registry_key",
    "urls_match",
]
