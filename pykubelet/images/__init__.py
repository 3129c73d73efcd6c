"""Image housekeeping (upstream ``pkg/kubelet/images``): garbage collection of unused images.

Pulling lives with the runtime manager (``kuberuntime.images``); this package
decides which images may go when the image filesystem fills.
"""

from pykubelet.images.gc import IMAGE_GC_PERIOD, ImageGCError, ImageGCManager, ImageGCPolicy

__all__ = ["IMAGE_GC_PERIOD", "ImageGCError", "ImageGCManager", "ImageGCPolicy"]
