"""requirements.lock agrees with pyproject.toml, and the venv running the tests holds it.

pyproject.toml states the ranges pykubelet works with; requirements.lock (written by
scripts/lock.sh) pins what scripts/setup.sh installs. A range changed without a new lock
would leave every machine on versions the project no longer asks for.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"
PYPROJECT = REPO / "pyproject.toml"

# A pinned requirement line: "name==version", an optional "; marker", the hashes after.
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)"
                  r"(?:\s*;\s*(?P<marker>[^\\]+?))?\s*\\?$")


def locked() -> dict[str, tuple[Version, Marker | None, int]]:
    """Each locked package: its version, its environment marker, how many hashes it has."""
    pins: dict[str, tuple[Version, Marker | None, int]] = {}
    name = ""
    for line in LOCK.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            name = canonicalize_name(match["name"])
            marker = Marker(match["marker"]) if match["marker"] else None
            pins[name] = (Version(match["version"]), marker, 0)
        elif line.strip().startswith("--hash=sha256:") and name:
            version, marker, hashes = pins[name]
            pins[name] = (version, marker, hashes + 1)
    return pins


def project_requirements() -> list[Requirement]:
    """What pyproject.toml asks for: runtime, the test extra and the build backend."""
    project = tomllib.loads(PYPROJECT.read_text())
    texts = [*project["project"]["dependencies"],
             *project["project"]["optional-dependencies"]["test"],
             *project["build-system"]["requires"]]
    return [Requirement(text) for text in texts]


def test_every_project_requirement_is_locked_within_its_range() -> None:
    pins = locked()
    outside = []
    for requirement in project_requirements():
        name = canonicalize_name(requirement.name)
        if name not in pins:
            outside.append(f"{requirement}: not in requirements.lock")
            continue
        version = pins[name][0]
        if not requirement.specifier.contains(version, prereleases=True):
            outside.append(f"{requirement}: locked at {version}")
    assert outside == [], "run scripts/lock.sh: " + "; ".join(outside)


def test_every_locked_package_carries_hashes() -> None:
    pins = locked()
    assert len(pins) > 20, "requirements.lock looks truncated"
    assert [name for name, (_, _, hashes) in pins.items() if hashes == 0] == []


def test_the_running_environment_holds_the_locked_versions() -> None:
    """The tests themselves run on what setup.sh installed from the lock, nothing newer.

    scripts/test-newest.sh deselects this test: it runs the suite on the newest releases
    within pyproject.toml's ranges on purpose.
    """
    differing = []
    for name, (version, marker, _) in locked().items():
        if marker is not None and not marker.evaluate():
            continue
        try:
            installed = Version(metadata.version(name))
        except metadata.PackageNotFoundError:
            differing.append(f"{name}: not installed (locked {version})")
            continue
        if installed != version:
            differing.append(f"{name}: {installed} installed, {version} locked")
    assert differing == [], "; ".join(differing)
