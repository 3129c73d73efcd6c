"""A keyring from a pod's image pull secrets (upstream ``pkg/credentialprovider/secrets``).

Only a secret of type ``kubernetes.io/dockerconfigjson`` with a non-empty
``.dockerconfigjson`` key (the ``auths`` map of a Docker ``config.json``) or of
type ``kubernetes.io/dockercfg`` with a non-empty ``.dockercfg`` key (the map
itself, the legacy format) contributes; any other secret is ignored. An entry
gives ``username`` and ``password``, or ``auth`` (base64 of ``user:password``,
padded or not), which wins when both are present; keys are matched without
regard to case, as Go's JSON decoder does. All secrets go into one keyring, in
the pod's order. A secret that cannot be decoded fails the whole lookup, as
upstream's does: the pull is not attempted with a guess.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pykubelet.credentialprovider.keyring import AuthConfig, DockerKeyring

SECRET_TYPE_DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
SECRET_TYPE_DOCKERCFG = "kubernetes.io/dockercfg"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
DOCKERCFG_KEY = ".dockercfg"


class PullSecretError(ValueError):
    """An image pull secret that cannot be read; the message names the secret and key."""


def _field(entry: Mapping[str, Any], name: str) -> str:
    for key, value in entry.items():
        if key.lower() == name:
            if not isinstance(value, str):
                raise ValueError(f"{key}: expected a string, got {type(value).__name__}")
            return value
    return ""


def decode_auth_field(field: str) -> tuple[str, str]:
    """``base64(user:password)`` as (user, password); padded and unpadded base64 both read."""
    text = field.strip() if field.strip().endswith("=") else field + "=" * (-len(field) % 4)
    try:
        decoded = base64.b64decode(text, validate=True).decode()
    except (binascii.Error, ValueError) as err:
        raise ValueError(f"auth: {err}") from err
    user, sep, password = decoded.partition(":")
    if not sep:
        raise ValueError("unable to parse auth field, must be formatted as "
                         "base64(username:password)")
    return user, password


def _entry(value: Any) -> AuthConfig:
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    username, password = _field(value, "username"), _field(value, "password")
    auth = _field(value, "auth")
    if auth:
        username, password = decode_auth_field(auth)
    return AuthConfig(username=username, password=password, email=_field(value, "email"))


def docker_config_entries(document: Any) -> list[tuple[str, AuthConfig]]:
    """(location, credential) of a ``.dockercfg`` map; ``ValueError`` names the entry."""
    if document is None:
        return []
    if not isinstance(document, dict):
        raise ValueError(f"expected an object of registries, got {type(document).__name__}")
    entries = []
    for location, value in document.items():
        try:
            entries.append((location, _entry(value)))
        except ValueError as err:
            raise ValueError(f"entry {location!r}: {err}") from err
    return entries


def _secret_fields(secret: Any) -> tuple[str, str, Mapping[str, Any]]:
    """(namespace/name, type, the data map) of a Secret read from the API (a dict) or a model."""
    if isinstance(secret, dict):
        meta = secret.get("metadata") or {}
        name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        return name, str(secret.get("type") or ""), secret.get("data") or {}
    meta = getattr(secret, "metadata", None)
    name = f"{getattr(meta, 'namespace', '')}/{getattr(meta, 'name', '')}"
    return name, str(getattr(secret, "type", "") or ""), getattr(secret, "data", None) or {}


def make_docker_keyring(pull_secrets: Sequence[Any]) -> DockerKeyring:
    """One keyring of every usable secret in ``pull_secrets``; ``PullSecretError`` when one
    of the right type does not decode."""
    keyring = DockerKeyring()
    for secret in pull_secrets:
        name, secret_type, data = _secret_fields(secret)
        if secret_type == SECRET_TYPE_DOCKER_CONFIG_JSON and data.get(DOCKER_CONFIG_JSON_KEY):
            key = DOCKER_CONFIG_JSON_KEY
        elif secret_type == SECRET_TYPE_DOCKERCFG and data.get(DOCKERCFG_KEY):
            key = DOCKERCFG_KEY
        else:
            continue
        try:
            document = json.loads(base64.b64decode(data[key], validate=True))
            if key == DOCKER_CONFIG_JSON_KEY:
                if not isinstance(document, dict):
                    raise ValueError("expected an object with auths")
                document = document.get("auths")
            keyring.add(docker_config_entries(document))
        except (ValueError, TypeError, binascii.Error) as err:
            raise PullSecretError(f'image pull secret "{name}": {key}: {err}') from err
    return keyring
