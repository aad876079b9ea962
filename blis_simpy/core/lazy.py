"""Names a module exports but imports only when first read (PEP 562), so that importing the
package or the API does not load the layers a single run never uses."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_names(module: str, homes: Mapping[str, str],
               namespace: MutableMapping[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` that imports `homes[name]` on first read of `name` and keeps the
    value in the module's `namespace`, so later reads never call it again."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    return getattr_
