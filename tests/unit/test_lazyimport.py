"""The generated client's packages are deferred: less memory, the same names.

The kubelet process imports ``pykubelet`` before anything else, so it runs
with ``kubernetes_asyncio``'s re-exporting packages deferred
(``pykubelet/util/lazyimport.py``). These tests start fresh interpreters, the
only way to see what an import loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pykubelet.util.lazyimport import DeferredPackage, defer_reexports, reexport_table


def run_python(code: str, *, path: Path | None = None) -> dict[str, object]:
    env_path = [str(path)] if path else []
    prelude = f"import sys; sys.path[:0] = {env_path!r}\n"
    out = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                         check=True, capture_output=True, text=True, timeout=120)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


RSS_AND_MODULES = """
    import json, sys
    def rss_mib():
        with open('/proc/self/statm') as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    {imports}
    loaded = [m for m in sys.modules if m.startswith('kubernetes_asyncio')]
    print(json.dumps({{'rss': rss_mib(), 'loaded': loaded}}))
"""


def test_the_kubelets_imports_leave_the_unused_api_classes_and_models_unloaded() -> None:
    kubelet = run_python(RSS_AND_MODULES.format(imports="import pykubelet.cmd.app"))
    # The same imports with the generated client imported first, as it was before.
    eager = run_python(RSS_AND_MODULES.format(
        imports="import kubernetes_asyncio; import pykubelet.cmd.app"))
    loaded = set(kubelet["loaded"])  # type: ignore[call-overload]
    assert "kubernetes_asyncio.client.api.apps_v1_api" not in loaded
    assert "kubernetes_asyncio.client.models.v1_stateful_set" not in loaded
    assert "kubernetes_asyncio.client.api.apps_v1_api" in set(eager["loaded"])  # type: ignore[call-overload]
    # About 30 MiB on CPython 3.11; a margin for other versions.
    assert float(eager["rss"]) - float(kubelet["rss"]) > 15  # type: ignore[arg-type]


def test_every_exported_name_is_the_object_the_real_package_exports() -> None:
    code = """
        import json, sys
        {first}
        import importlib
        out = {{}}
        for package in ('kubernetes_asyncio', 'kubernetes_asyncio.client',
                        'kubernetes_asyncio.client.models', 'kubernetes_asyncio.client.api'):
            module = importlib.import_module(package)
            out[package] = {{
                'kind': type(module).__name__,
                'names': {{name: getattr(getattr(module, name), '__qualname__',
                                         getattr(getattr(module, name), '__name__', ''))
                          for name in module.__all__}},
                'version': getattr(module, '__version__', None),
            }}
        print(json.dumps(out))
    """
    deferred = run_python(code.format(first="import pykubelet"))
    real = run_python(code.format(first=""))
    assert {p["kind"] for p in deferred.values()} == {"DeferredPackage"}  # type: ignore[index]
    assert {p["kind"] for p in real.values()} == {"module"}  # type: ignore[index]
    for package, exported in real.items():
        assert deferred[package]["names"] == exported["names"], package  # type: ignore[index]
        assert deferred[package]["version"] == exported["version"], package  # type: ignore[index]


def test_a_pod_decodes_and_the_client_works_through_deferred_packages() -> None:
    result = run_python("""
        import json, sys
        import pykubelet
        from kubernetes_asyncio.client import ApiClient, V1Pod
        from kubernetes_asyncio.client.exceptions import ApiException
        from pykubelet.api import modelcodec
        pod = {'apiVersion': 'v1', 'kind': 'Pod',
               'metadata': {'name': 'web', 'namespace': 'default',
                            'creationTimestamp': '2026-01-01T00:00:00Z'},
               'spec': {'containers': [{'name': 'c', 'image': 'busybox',
                                        'readinessProbe': {'httpGet': {'port': 80}}}]}}
        ours = modelcodec.decode(pod, 'V1Pod')
        generated = modelcodec.generated_decode(pod, 'V1Pod')
        print(json.dumps({'equal': ours == generated, 'is_pod': isinstance(ours, V1Pod),
                          'probe_port': ours.spec.containers[0].readiness_probe.http_get.port,
                          'exception': ApiException.__module__}))
    """)
    assert result == {"equal": True, "is_pod": True, "probe_port": 80,
                      "exception": "kubernetes_asyncio.client.exceptions"}


def make_package(root: Path, name: str, init: str) -> None:
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(init))
    (package / "heavy.py").write_text(
        "import sys\nsys.modules['__main__'].heavy_loaded = True\nclass Thing: pass\n")


def test_a_reexporting_package_loads_a_submodule_only_when_its_name_is_read(
        tmp_path: Path) -> None:
    make_package(tmp_path, "reexports", """
        '''Doc.'''
        from reexports.heavy import Thing
        import reexports.heavy as heavy_module
        __version__ = "1.0"
    """)
    result = run_python("""
        import json, sys
        from pykubelet.util.lazyimport import defer_reexports
        heavy_loaded = False
        done = defer_reexports('reexports')
        import reexports
        before = heavy_loaded
        from reexports import Thing
        print(json.dumps({'done': done, 'before': before, 'after': heavy_loaded,
                          'version': reexports.__version__, 'thing': Thing.__module__,
                          'alias': reexports.heavy_module.__name__}))
    """, path=tmp_path)
    assert result == {"done": ["reexports"], "before": False, "after": True,
                      "version": "1.0", "thing": "reexports.heavy", "alias": "reexports.heavy"}


@pytest.mark.parametrize("init", [
    "from reexports.heavy import Thing\nprint('side effect')\n",
    "from .heavy import Thing\n",
    "from reexports.heavy import *\n",
    "import reexports.heavy\n",
    "try:\n    from reexports.heavy import Thing\nexcept ImportError:\n    Thing = None\n",
    "VERSION = compute()\n",
])
def test_a_package_that_does_more_than_reexport_is_imported_normally(init: str) -> None:
    assert reexport_table(init) is None


def test_a_package_already_imported_or_under_a_normal_parent_is_left_alone(
        tmp_path: Path) -> None:
    make_package(tmp_path, "plain", "from plain.heavy import Thing\nx = len('ab')\n")
    (tmp_path / "plain" / "sub").mkdir()
    (tmp_path / "plain" / "sub" / "__init__.py").write_text("from plain.heavy import Thing\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert defer_reexports("plain", "plain.sub", "json") == []
        import plain
        assert not isinstance(plain, DeferredPackage)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "plain" or m.startswith("plain.")]:
            del sys.modules[name]


def test_a_name_the_package_lacks_is_an_attribute_error_naming_it(tmp_path: Path) -> None:
    make_package(tmp_path, "reexports2", "from reexports2.heavy import Thing\n")
    (tmp_path / "reexports2" / "broken.py").write_text("import no_such_module_here\n")
    result = run_python("""
        import json
        from pykubelet.util.lazyimport import defer_reexports
        defer_reexports('reexports2')
        import reexports2
        try:
            reexports2.Missing
        except AttributeError as err:
            missing = str(err)
        try:
            reexports2.broken
        except ModuleNotFoundError as err:
            broken = err.name
        print(json.dumps({'missing': missing, 'broken': broken}))
    """, path=tmp_path)
    assert "'Missing'" in str(result["missing"])
    assert result["broken"] == "no_such_module_here"
