"""The kubelet itself: the composition root and the sync loop.

Read in this order: ``builder`` wires every subsystem together from a
``KubeletServer`` (upstream ``RunKubelet`` / ``NewMainKubelet``); ``kubelet``
holds the ``Kubelet`` and its pod handlers (``HandlePodAdditions``...,
``SyncPod``); ``sync_loop`` is ``syncLoop``/``syncLoopIteration``, the one
place where config updates, PLEG events, the sync ticker, housekeeping and
probe results meet; ``pod_manager`` keeps the desired pods; ``runtime_state``
tracks the runtime's health.
"""
