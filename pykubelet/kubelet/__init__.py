"""The kubelet itself: construction, the run loop, pod handlers, and the sync loop.

Read in this order: ``dependencies`` is what the command hands over
(upstream ``kubelet.Dependencies``); ``kubelet`` holds ``new_main_kubelet``
(``NewMainKubelet``), ``Kubelet.run`` / ``initialize_modules`` and the pod
handlers (``HandlePodAdditions``...); ``pod_sync`` is the pod workers' syncer
(``SyncPod``, ``SyncTerminatingPod``, ``SyncTerminatedPod``); ``sync_loop``
is ``syncLoop``/``syncLoopIteration``, the one place where config updates,
PLEG events, the sync ticker, housekeeping and probe results meet;
``active_deadline`` fails pods past their ``activeDeadlineSeconds`` (asked by
the sync tick and by every status generation);
``pod_manager`` keeps the desired pods; ``runtime_state`` tracks the
runtime's health; ``getters`` names the directories under ``--root-dir``.
The chain that calls into this package (``run`` → ``run_kubelet`` →
``create_and_init_kubelet`` → ``start_kubelet``) is in ``pykubelet.cmd.server``.
"""
