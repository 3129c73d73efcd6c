"""Small process-wide helpers: klog-style logging, the lock file, backoff."""
