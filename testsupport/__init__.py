"""What the tests and the benchmarks share: real runtimes, real control planes, real kubelets.

Both ``tests/`` and ``bench/`` import from here, as a package from the
checkout root (``pytest``, ``python -m bench.<name>``); nothing here imports
either of them, and nothing here needs pytest.

- ``testbed``: a private containerd 1.6 with CNI and the local images
  (drives ``scripts/testbed/containerd.sh``);
- ``controlplane``: a real Kubernetes 1.20 control plane, its build, and the
  upstream Go kubelet of the same build (drives ``scripts/testbed/controlplane*.sh``);
- ``kubelet_process``: a real ``python -m pykubelet`` in standalone mode,
  and what a user sees of it (``/pods``, the runtime through CRI);
- ``cluster``: that kubelet joined to the control plane, what kubectl
  shows, and disruptions of the real processes;
- ``device_plugin``: upstream's sample device plugin beside a test kubelet,
  on that kubelet's own device-plugin directory;
- ``podwatch``: a namespace's pods as an admin watch sees them start and go;
- ``soak``: the soak's pod mix and churn, and what a node holds after it;
- ``pki``: a throw-away certificate authority for the kubelet API's client
  certificates;
- ``cluster_dns``: the testbed's stand-in for CoreDNS, Debian's unbound serving
  ``cluster.local`` from the API (``scripts/testbed/dns.sh``).
"""
