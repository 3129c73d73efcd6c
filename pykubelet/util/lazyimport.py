"""Packages whose ``__init__`` only re-exports, loaded one name at a time.

``kubernetes_asyncio``'s generated packages import everything they export:
``kubernetes_asyncio.client`` pulls in all 66 API classes and 768 models, and
the top package its config, dynamic and stream helpers as well. The kubelet
uses a few dozen models and two or three API classes, yet the full import
cost about 38 MiB of resident memory, a quarter of the process at 110 pods
(issue 37), and a second of start-up.

:func:`defer_reexports` puts a stand-in module in ``sys.modules`` for such a
package before anything imports it. The stand-in has the package's real spec
and ``__path__`` (so its submodules import as usual) and the same names: each
``from X import Y`` of the real ``__init__`` becomes an entry that is resolved,
by importing ``X`` and reading ``Y``, on first access, and cached. The
package's literal assignments (``__version__``, ``__all__``) are copied as
they are.

Only an ``__init__`` made of nothing but absolute imports, literal assignments
and a docstring is deferred; any other statement could have an effect the
stand-in would skip, so such a package is imported normally. A package
already imported is left alone.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from pathlib import Path

# What an exported name resolves to: (module, attribute), or (module, None)
# for ``import module as name``.
Reexports = dict[str, tuple[str, str | None]]


class DeferredPackage(types.ModuleType):
    """A package whose re-exported names are imported when first read."""

    _deferred: Reexports

    def __getattr__(self, name: str) -> object:
        # Only called for names not yet in the module's dict.
        deferred = self.__dict__.get("_deferred", {})
        target = deferred.get(name)
        if target is None:
            try:
                value: object = importlib.import_module(f"{self.__name__}.{name}")
            except ModuleNotFoundError as err:
                if err.name != f"{self.__name__}.{name}":
                    raise
                raise AttributeError(
                    f"module {self.__name__!r} has no attribute {name!r}"
                ) from None
        else:
            module_name, attribute = target
            module = importlib.import_module(module_name)
            value = module if attribute is None else getattr(module, attribute)
        setattr(self, name, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_deferred", {})))


def reexport_table(source: str) -> tuple[Reexports, dict[str, object]] | None:
    """The names an ``__init__`` re-exports and its literal assignments.

    ``None`` when the module does anything else (a relative import, a call, a
    conditional...), which only running it would reproduce.
    """
    deferred: Reexports = {}
    literals: dict[str, object] = {}
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            for alias in statement.names:
                if alias.name == "*":
                    return None
                deferred[alias.asname or alias.name] = (statement.module, alias.name)
        elif isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname is None:
                    # ``import a.b`` binds ``a``, not a name of this package.
                    return None
                deferred[alias.asname] = (alias.name, None)
        elif (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
        ):
            try:
                literals[statement.targets[0].id] = ast.literal_eval(statement.value)
            except ValueError:
                return None
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring
        else:
            return None
    return deferred, literals


def defer_reexports(*names: str) -> list[str]:
    """Stand deferred packages in for ``names`` (parents first); returns those deferred.

    A name is skipped when it is already imported, cannot be found, or its
    ``__init__`` does more than re-export; so is every name under a skipped
    parent, which then imports normally.
    """
    done: list[str] = []
    for name in names:
        parent, _, child = name.rpartition(".")
        if name in sys.modules or (parent and parent not in done):
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None or spec.submodule_search_locations is None:
            continue
        table = reexport_table(Path(spec.origin).read_text(encoding="utf-8"))
        if table is None:
            continue
        deferred, literals = table
        module = DeferredPackage(name)
        module.__spec__ = spec
        module.__file__ = spec.origin
        module.__loader__ = spec.loader
        module.__path__ = list(spec.submodule_search_locations)
        module.__package__ = name
        module.__dict__.update(literals)
        module._deferred = deferred
        sys.modules[name] = module
        if parent:
            setattr(sys.modules[parent], child, module)
        done.append(name)
    return done
