"""Writing volume files so that a container never sees half an update (``AtomicWriter``).

ConfigMap, Secret, downwardAPI and projected volumes change while containers
read them. Upstream's layout makes every change one ``rename``:

- the files of one version live in a hidden, timestamped directory
  (``..2026_11_23_14_29_21.123456789``);
- ``..data`` is a symlink to the current version's directory, replaced by
  renaming a freshly made ``..data_tmp`` symlink over it;
- what the user sees at the top level are symlinks ``<name> -> ..data/<name>``
  for each top-level entry of the payload, so they never change target.

An unchanged payload writes nothing. Paths in a payload come from users
(``items[].path``) and are checked by ``validate_path`` before anything is
written: no absolute paths, no ``..`` element, no leading ``..``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass

DATA_DIR_NAME = "..data"
NEW_DATA_DIR_NAME = "..data_tmp"
MAX_PATH_LENGTH = 4096
MAX_FILE_NAME_LENGTH = 255


@dataclass(frozen=True)
class FileProjection:
    data: bytes
    mode: int
    fs_user: int | None = None  # the file's owner; None: the kubelet's (root)


class PathError(ValueError):
    """A payload path that must not be written (it could escape the volume)."""


def validate_path(target_path: str) -> None:
    """Refuse paths that are absolute, too long, or contain or start with ``..``."""
    if len(target_path) > MAX_PATH_LENGTH:
        raise PathError(f"invalid path: must be less than or equal to {MAX_PATH_LENGTH} "
                        f"characters")
    if not target_path:
        raise PathError("invalid path: must not be empty")
    if os.path.isabs(target_path):
        raise PathError(f"invalid path: must be relative path: {target_path}")
    for item in target_path.split(os.sep):
        if item == "..":
            raise PathError(f"invalid path: must not contain '..': {target_path}")
        if len(item) > MAX_FILE_NAME_LENGTH:
            raise PathError(f"invalid path: filenames must be less than or equal to "
                            f"{MAX_FILE_NAME_LENGTH} characters")
    if target_path.startswith(".."):
        raise PathError(f"invalid path: must not start with '..': {target_path}")


def _clean(path: str) -> str:
    return os.path.normpath(path)


class AtomicWriter:
    """Writes payloads into ``target_dir`` in upstream's ``..data`` layout."""

    def __init__(self, target_dir: str) -> None:
        self.target_dir = target_dir

    def write(self, payload: Mapping[str, FileProjection]) -> bool:
        """Make ``target_dir`` hold exactly ``payload``; True when something changed."""
        cleaned: dict[str, FileProjection] = {}
        for path, projection in payload.items():
            validate_path(path)
            cleaned[_clean(path)] = projection
        data_dir = os.path.join(self.target_dir, DATA_DIR_NAME)
        try:
            old_ts_name = os.readlink(data_dir)
        except OSError:
            old_ts_name = ""
        old_ts_dir = os.path.join(self.target_dir, old_ts_name) if old_ts_name else ""
        if old_ts_dir and os.path.isdir(old_ts_dir) and self._unchanged(old_ts_dir, cleaned):
            # The user-visible links may have been lost (a crash between steps).
            self._create_user_visible_links(cleaned)
            return False
        os.makedirs(self.target_dir, exist_ok=True)
        prefix = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        ts_dir = tempfile.mkdtemp(prefix=prefix, dir=self.target_dir)
        os.chmod(ts_dir, 0o755)
        try:
            self._write_payload(ts_dir, cleaned)
            tmp_link = os.path.join(self.target_dir, NEW_DATA_DIR_NAME)
            if os.path.lexists(tmp_link):
                os.unlink(tmp_link)
            os.symlink(os.path.basename(ts_dir), tmp_link)
            os.rename(tmp_link, data_dir)
        except BaseException:
            shutil.rmtree(ts_dir, ignore_errors=True)
            raise
        self._create_user_visible_links(cleaned)
        self._remove_stale_links(cleaned)
        if old_ts_dir and os.path.basename(old_ts_dir) != os.path.basename(ts_dir):
            shutil.rmtree(old_ts_dir, ignore_errors=True)
        return True

    @staticmethod
    def _unchanged(ts_dir: str, payload: Mapping[str, FileProjection]) -> bool:
        found: set[str] = set()
        for root, _dirs, files in os.walk(ts_dir):
            for name in files:
                found.add(os.path.relpath(os.path.join(root, name), ts_dir))
        if found != set(payload):
            return False
        # Content only, as upstream: a pod's modes never change (its volumes are
        # immutable), and fsGroup ownership adds group bits to what was written.
        for path, projection in payload.items():
            full = os.path.join(ts_dir, path)
            try:
                with open(full, "rb") as existing:
                    if existing.read() != projection.data:
                        return False
            except OSError:
                return False
        return True

    @staticmethod
    def _write_payload(ts_dir: str, payload: Mapping[str, FileProjection]) -> None:
        for path, projection in payload.items():
            full = os.path.join(ts_dir, path)
            parent = os.path.dirname(full)
            os.makedirs(parent, mode=0o755, exist_ok=True)
            with open(full, "wb") as out:
                out.write(projection.data)
            os.chmod(full, projection.mode)
            if projection.fs_user is not None:
                os.chown(full, projection.fs_user, -1)

    def _create_user_visible_links(self, payload: Mapping[str, FileProjection]) -> None:
        for top in {path.split(os.sep, 1)[0] for path in payload}:
            link = os.path.join(self.target_dir, top)
            target = os.path.join(DATA_DIR_NAME, top)
            if os.path.islink(link) and os.readlink(link) == target:
                continue
            if os.path.lexists(link):
                if os.path.isdir(link) and not os.path.islink(link):
                    shutil.rmtree(link)
                else:
                    os.unlink(link)
            os.symlink(target, link)

    def _remove_stale_links(self, payload: Mapping[str, FileProjection]) -> None:
        wanted = {path.split(os.sep, 1)[0] for path in payload}
        for name in os.listdir(self.target_dir):
            if name.startswith("..") or name in wanted:
                continue
            full = os.path.join(self.target_dir, name)
            if os.path.islink(full) and os.readlink(full).startswith(DATA_DIR_NAME + os.sep):
                os.unlink(full)


__all__ = ["DATA_DIR_NAME", "AtomicWriter", "FileProjection", "PathError", "validate_path"]
