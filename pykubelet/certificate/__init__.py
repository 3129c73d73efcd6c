"""The kubelet's client certificate: TLS bootstrapping and rotation (upstream
``pkg/kubelet/certificate`` and ``client-go/util/certificate``).

- ``store``: ``kubelet-client-<time>.pem`` files and the ``-current`` link in ``--cert-dir``.
- ``csr``: keys, certificate requests, and waiting for the signed certificate.
- ``bootstrap``: ``--bootstrap-kubeconfig`` -> a certificate -> ``--kubeconfig``.
- ``manager``: ``rotateCertificates``, renewal at 70-90% of the lifetime.
"""
