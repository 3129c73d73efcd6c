"""The ``pykubelet`` command: flags, ``--config`` loading and process start-up (``cmd/kubelet/app``)."""
