"""What ``--version`` prints: the program's version and, for ``--version=raw``, its build.

Upstream answers ``--version=raw`` with ``version.Info`` (``k8s.io/apimachinery``)
printed as Go struct text (``%#v``), and tools parse that shape. pykubelet fills
the same fields with what describes a Python program: its package version, the
git commit and tree state of the checkout it runs from (an editable install; a
wheel has none), the interpreter for Go's toolchain fields, and the platform.
Fields with nothing to say keep upstream's unset values, so the text stays
honest rather than invented.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path

import pykubelet
from pykubelet.api.wellknown import KUBERNETES_VERSION, go_arch, go_os
from pykubelet.config.types import API_VERSION
from pykubelet.util.gotext import go_quote

# upstream's value when the build does not stamp a date
UNSET_BUILD_DATE = "1970-01-01T00:00:00Z"
GIT_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Info:
    """Upstream ``version.Info``, field for field and in its order."""

    Major: str = ""
    Minor: str = ""
    EmulationMajor: str = ""
    EmulationMinor: str = ""
    MinCompatibilityMajor: str = ""
    MinCompatibilityMinor: str = ""
    GitVersion: str = ""
    GitCommit: str = ""
    GitTreeState: str = ""
    BuildDate: str = UNSET_BUILD_DATE
    GoVersion: str = ""
    Compiler: str = ""
    Platform: str = ""

    def go_struct_text(self) -> str:
        """The value as Go's ``%#v`` prints it: ``version.Info{Major:"0", ...}``."""
        parts = ", ".join(f"{f.name}:{go_quote(getattr(self, f.name))}" for f in fields(self))
        return f"version.Info{{{parts}}}"


def version_string() -> str:
    """The one line ``--version`` prints."""
    return (f"pykubelet v{pykubelet.__version__} "
            f"({API_VERSION}, modelled on Kubernetes {KUBERNETES_VERSION})")


def _git(checkout: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True,
                                text=True, timeout=GIT_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _source_checkout() -> Path | None:
    """The git checkout the running package comes from, if it runs from one."""
    root = Path(pykubelet.__file__).resolve().parent.parent
    if (root / ".git").exists() and (root / "pyproject.toml").is_file():
        return root
    return None


def get() -> Info:
    """The running pykubelet's version and build information."""
    major, minor, *_ = [*pykubelet.__version__.split("."), "", ""]
    commit = tree_state = ""
    checkout = _source_checkout()
    if checkout is not None:
        commit = _git(checkout, "rev-parse", "HEAD") or ""
        if commit:
            changes = _git(checkout, "status", "--porcelain", "--untracked-files=no")
            if changes is not None:
                tree_state = "dirty" if changes else "clean"
    return Info(
        Major=major, Minor=minor,
        GitVersion=f"v{pykubelet.__version__}",
        GitCommit=commit, GitTreeState=tree_state,
        GoVersion=f"python{platform.python_version()}",
        Compiler=platform.python_implementation().lower(),
        Platform=f"{go_os()}/{go_arch()}",
    )
