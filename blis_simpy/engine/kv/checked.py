"""Debug checks for a block pool: verify its accounting after every operation that changes it.

Chosen at build time (`build(..., checks=True)`), so ordinary runs pay nothing for it.
"""

from __future__ import annotations

from typing import TypeVar

from blis_simpy.core.request import Request
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.pool import PrefixHit

P = TypeVar("P", bound=KVCache)


def checked(pool_type: type[P]) -> type[P]:
    """A subclass of `pool_type` that runs `check()` after every mutating operation."""

    class Checked(pool_type):  # type: ignore[misc, valid-type]
        def admit(self, req: Request, hit: PrefixHit, start: int, tokens: int) -> bool:
            ok = super().admit(req, hit, start, tokens)
            self.check()
            return ok

        def allocate(self, req: Request, start: int, tokens: int) -> bool:
            ok = super().allocate(req, start, tokens)
            self.check()
            return ok

        def open_block(self, req: Request) -> bool:
            ok = super().open_block(req)
            self.check()
            return ok

        def publish(self, req: Request, position: int) -> None:
            super().publish(req, position)
            self.check()

        def complete(self, req: Request) -> None:
            super().complete(req)
            self.check()

        def release(self, req: Request) -> None:
            super().release(req)
            self.check()

    Checked.__name__ = Checked.__qualname__ = f"Checked{pool_type.__name__}"
    return Checked
