"""The ``pykubelet`` command: flags, ``--config`` loading and start-up (``cmd/kubelet/app``)."""
