"""A registered pykubelet with upstream's default kubelet API security, behind the real
kube-apiserver.

Only ``authentication.x509.clientCAFile`` is set: webhook authentication (a
``TokenReview`` for bearer tokens), anonymous requests off and authorization
mode ``Webhook`` (a ``SubjectAccessReview`` for every request) are the
configuration's defaults. The API server presents its
``--kubelet-client-certificate`` and is authorized like any other caller, so
``kubectl logs`` and ``kubectl exec`` work only if the whole chain does; a
service account that RBAC does not grant ``nodes/proxy`` is refused. A client
certificate from a CA the kubelet does not trust does not end the connection:
it does not authenticate (401), and a valid bearer token sent with it still
does, as with upstream's kubelet.

A module of its own: no other kubelet shares the runtime meanwhile (a kubelet
tears down sandboxes it does not know).
"""

from __future__ import annotations

import secrets
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_kubelet_api_cluster import (
    NAMESPACE,
    cluster_role,
    service_account_token,
    unique,
)
from testsupport.cluster import ClusterKubelet, create, get_pod, unique_node_name
from testsupport.cluster import api_pod as cluster_api_pod
from testsupport.controlplane import ControlPlane
from testsupport.kubelet_process import remove_everything
from testsupport.pki import ClientCert, TestCA
from testsupport.polling import wait_until
from testsupport.testbed import Testbed

pytestmark = [pytest.mark.controlplane, pytest.mark.containerd]


class WebhookNode:
    """A registered pykubelet whose API uses the defaults: TokenReview, SubjectAccessReview."""

    def __init__(self, kubelet: ClusterKubelet, plane: ControlPlane, pod: str) -> None:
        self.kubelet = kubelet
        self.plane = plane
        self.pod = pod

    def get(self, path: str, token: str | None = None,
            cert: ClientCert | None = None) -> tuple[int, str]:
        """GET on the kubelet port, as a caller that pins the kubelet's self-signed CA."""
        context = ssl.create_default_context(
            cafile=str(self.kubelet.cert_dir / "kubelet.crt"))
        if cert is not None:
            context.load_cert_chain(str(cert.cert_file), str(cert.key_file))
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.kubelet.port}{path}",
            headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()


@pytest.fixture(scope="module")
def webhook_node(control_plane: ControlPlane, testbed: Testbed,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookNode]:
    plane = control_plane
    name = unique_node_name("webhook")
    # Only the client CA is set: webhook authentication on, anonymous off and
    # authorization mode Webhook are the configuration's defaults, and the
    # kubelet listens on all addresses as upstream's does, so the API server
    # reaches it at the node's InternalIP.
    kubelet = ClusterKubelet(
        tmp_path_factory.mktemp("webhook"), testbed.endpoint, plane, name,
        kubeconfig=plane.node_kubeconfig(name), extra_config={
            "address": "0.0.0.0",
            "authentication": {"x509": {"clientCAFile": str(plane.ca_cert)}},
            "authorization": {}})
    pod = f"talker-{secrets.token_hex(3)}"
    try:
        kubelet.start()
        kubelet.wait_ready(60)
        # The ServiceAccount admission plugin needs the namespace's default
        # account, which a control plane started just now may not have yet.
        wait_until(lambda: plane.kubectl("get", "serviceaccount", "default", "-n", NAMESPACE,
                                         check=False).returncode == 0,
                   60, "the default service account")
        create(plane, cluster_api_pod(
            pod, name, testbed.busybox_image,
            "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.5; done", grace=1))
        wait_until(lambda: ((get_pod(plane, pod) or {}).get("status") or {}).get("phase")
                   == "Running", 90, f"pod {pod} Running",
                   on_timeout=lambda: kubelet.log_text()[-3000:])
        yield WebhookNode(kubelet, plane, pod)
    finally:
        # The kubelet first: it would otherwise tear the deleted pod down while
        # remove_everything is at work.
        kubelet.stop()
        plane.kubectl("delete", "pod", "-n", NAMESPACE, pod, "--ignore-not-found",
                      "--grace-period=0", "--force", "--wait=false", check=False)
        kubelet.delete_node()
        remove_everything(testbed.endpoint)


def test_kubectl_logs_and_exec_through_a_webhook_authorized_kubelet(
        webhook_node: WebhookNode) -> None:
    plane, pod = webhook_node.plane, webhook_node.pod
    # The API server's --kubelet-client-certificate is authenticated by the
    # client CA and authorized by a SubjectAccessReview the API server answers.
    logs = wait_until(lambda: (r := plane.kubectl("logs", pod, "--tail=2", check=False))
                      .returncode == 0 and r.stdout, 20, "kubectl logs")
    assert all(line.startswith("tick ") for line in logs.splitlines()), logs
    result = plane.kubectl("exec", pod, "--", "sh", "-c", "echo from-$HOSTNAME; exit 3",
                           check=False)
    assert result.stdout.strip() == f"from-{pod}"
    assert result.returncode == 3, result.stderr


def test_webhook_kubelet_refuses_what_rbac_does_not_grant(webhook_node: WebhookNode) -> None:
    plane, pod = webhook_node.plane, webhook_node.pod
    logs_path = f"/containerLogs/{NAMESPACE}/{pod}/app?tailLines=1"
    # Anonymous requests are off by default.
    assert webhook_node.get(logs_path) == (401, "Unauthorized")
    account = unique("reader")
    token = service_account_token(plane, account)
    user = f"system:serviceaccount:{NAMESPACE}:{account}"
    try:
        # The token is valid (TokenReview), but RBAC grants it no nodes/proxy.
        status, body = webhook_node.get(logs_path, token)
        assert status == 403
        assert body.startswith(f"Forbidden (user={user}, verb=get, resource=nodes, "
                               f"subresource(s)=["), body
        assert "proxy" in body
        with cluster_role(plane, unique("node-proxy"), "proxy", account):
            answer = wait_until(lambda: (a := webhook_node.get(logs_path, token))[0] == 200 and a,
                                30, "the granted role to let the token read logs", interval=0.5)
            assert answer[1].startswith("tick "), answer
    finally:
        plane.kubectl("delete", "serviceaccount", account, "-n", NAMESPACE, "--wait=false")


def test_a_certificate_from_an_unknown_ca_leaves_the_bearer_token_to_decide(
        webhook_node: WebhookNode, tmp_path: Path) -> None:
    plane = webhook_node.plane
    # An impostor's certificate names the most powerful user there is.
    stranger = TestCA(tmp_path, "other-ca").client("kube-apiserver-kubelet-client",
                                                   ("system:masters",))
    # The handshake completes; the certificate does not authenticate.
    assert webhook_node.get("/pods", cert=stranger) == (401, "Unauthorized")
    account = unique("carrier")
    token = service_account_token(plane, account)
    try:
        # With a valid token beside it, the request is the token's user's
        # (whom RBAC grants nothing on nodes), not the certificate's.
        status, body = webhook_node.get("/pods", token, cert=stranger)
        assert (status, body) == (403, f"Forbidden (user=system:serviceaccount:{NAMESPACE}:"
                                       f"{account}, verb=get, resource=nodes, "
                                       f"subresource(s)=[pods proxy])\n")
        with cluster_role(plane, unique("node-proxy"), "proxy", account):
            wait_until(lambda: webhook_node.get("/pods", token, cert=stranger)[0] == 200,
                       30, "the granted role to let the token through beside the certificate",
                       interval=0.5)
    finally:
        plane.kubectl("delete", "serviceaccount", account, "-n", NAMESPACE, "--wait=false")
    # The API server's own client certificate, made by the control plane's
    # openssl from the cluster CA, still authenticates (system:masters).
    issued = ClientCert(plane.apiserver_kubelet_client_cert,
                        plane.apiserver_kubelet_client_cert.with_suffix(".key"))
    assert webhook_node.get("/pods", cert=issued)[0] == 200
