"""The kubelet's certificates: TLS bootstrapping of the client certificate, and the
rotation of the client and serving certificates (upstream ``pkg/kubelet/certificate``
and ``client-go/util/certificate``).

- ``store``: ``kubelet-client-<time>.pem`` (``kubelet-server-<time>.pem``) files and the
  ``-current`` link in ``--cert-dir``.
- ``csr``: keys, certificate requests, and waiting for the signed certificate.
- ``bootstrap``: ``--bootstrap-kubeconfig`` -> a certificate -> ``--kubeconfig``.
- ``manager``: ``rotateCertificates`` and ``serverTLSBootstrap``, renewal at 70-90% of
  the lifetime.
"""
