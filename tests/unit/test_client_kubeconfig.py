"""--kubeconfig loading: clear errors naming the file, credentials, the bootstrap output."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import yaml

from pykubelet.client.kubeconfig import (
    KubeconfigError,
    client_certificate_pem,
    cluster_info,
    load_rest_config,
    write_kubeconfig,
)


def kubeconfig(path: Path, *, server: str = "https://127.0.0.1:6443",
               user: dict[str, object] | None = None, context: str = "ctx",
               current: str = "ctx") -> Path:
    document = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user or {"token": "abc"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
        "current-context": current,
    }
    path.write_text(yaml.safe_dump(document))
    return path


async def test_missing_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.kubeconfig"
    with pytest.raises(KubeconfigError) as caught:
        await load_rest_config(str(missing))
    assert str(missing) in str(caught.value)
    assert "no such file" in str(caught.value)


async def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad"
    path.write_text("clusters: [unclosed")
    with pytest.raises(KubeconfigError, match="not valid YAML") as caught:
        await load_rest_config(str(path))
    assert str(path) in str(caught.value)


async def test_unknown_current_context(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", current="elsewhere")
    with pytest.raises(KubeconfigError, match='context "elsewhere" not found'):
        await load_rest_config(str(path))


@pytest.mark.parametrize("server", ["127.0.0.1:6443", "ftp://x", ""])
async def test_server_must_be_a_url(tmp_path: Path, server: str) -> None:
    path = kubeconfig(tmp_path / "k", server=server)
    with pytest.raises(KubeconfigError, match="server"):
        await load_rest_config(str(path))


async def test_bearer_token_and_server(tmp_path: Path) -> None:
    rest = await load_rest_config(str(kubeconfig(tmp_path / "k")))
    assert rest.host == "https://127.0.0.1:6443"
    assert rest.configuration.api_key["BearerToken"] == "Bearer abc"
    assert not rest.has_client_certificate()


async def test_token_file_is_read_again(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    rest = await load_rest_config(str(kubeconfig(tmp_path / "k", user={"tokenFile": "token"})))
    assert rest.configuration.api_key["BearerToken"] == "Bearer first"
    token.write_text("second\n")
    rest.credentials._token_read_at = float("-inf")  # a minute has passed
    await rest.credentials.refresh(rest.configuration)
    assert rest.configuration.api_key["BearerToken"] == "Bearer second"


async def test_missing_client_certificate_file_is_named(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "k", user={"client-certificate": "missing.crt",
                                            "client-key": "missing.key"})
    with pytest.raises(KubeconfigError) as caught:
        await load_rest_config(str(path))
    assert str(path) in str(caught.value)
    assert "missing.crt" in str(caught.value)


def test_bootstrap_kubeconfig_round_trip(tmp_path: Path) -> None:
    pem = tmp_path / "kubelet-client-current.pem"
    pem.write_bytes(b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n")
    out = tmp_path / "sub" / "kubelet.kubeconfig"
    write_kubeconfig(str(out), server="https://10.0.0.1:6443", ca_file=None, ca_data=b"CA",
                     insecure=False, cert_path=str(pem), key_path=str(pem))
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    info = cluster_info(str(out))
    assert (info.server, info.ca_data, info.ca_file) == ("https://10.0.0.1:6443", b"CA", None)
    assert client_certificate_pem(str(out)) == pem.read_bytes()
    document = yaml.safe_load(out.read_text())
    assert document["current-context"] == "default-context"
    assert document["users"][0]["user"] == {"client-certificate": str(pem),
                                            "client-key": str(pem)}


def test_a_failed_kubeconfig_write_leaves_the_old_kubeconfig_and_no_stray_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "kubelet.kubeconfig"
    out.write_text("old: kubeconfig\n")

    def disk_full(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError):
        write_kubeconfig(str(out), server="https://10.0.0.1:6443", ca_file=None,
                         ca_data=b"CA", insecure=False, cert_path="c.pem", key_path="k.pem")
    assert out.read_text() == "old: kubeconfig\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kubelet.kubeconfig"]


def test_inline_client_certificate(tmp_path: Path) -> None:
    data = base64.b64encode(b"PEM").decode()
    path = kubeconfig(tmp_path / "k", user={"client-certificate-data": data,
                                            "client-key-data": data})
    assert client_certificate_pem(str(path)) == b"PEM"
