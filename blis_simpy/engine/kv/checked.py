"""Debug checks for a block pool: verify its accounting after every operation that changes it.

Chosen at build time (`build(..., checks=True)`), so ordinary runs pay nothing for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from blis_simpy.core.errors import InvariantError
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

        def wipe(self) -> None:
            super().wipe()
            self.check()

    Checked.__name__ = Checked.__qualname__ = f"Checked{pool_type.__name__}"
    return Checked


class KVOwner(Protocol):
    """An instance as the ownership check sees it: its id, its pool and who holds blocks."""

    id: str
    kv: Any

    def kv_holders(self) -> list[Request]: ...


def check_ownership(instances: Iterable[KVOwner]) -> None:
    """P/D single ownership (`pd_ownership`): every holder of KV blocks (a request, or a
    transfer's reservation) holds them at one instance only, and every block's reference
    count at each instance is exactly the number of its holders there referencing it, so no
    block is shared across owners, leaked or freed twice."""
    where: dict[int, str] = {}
    for inst in instances:
        counts: Counter[int] = Counter()
        for holder in inst.kv_holders():
            other = where.setdefault(id(holder), inst.id)
            if other != inst.id:
                raise InvariantError(f"{getattr(holder, 'name', 'a reservation')} holds KV "
                                     f"blocks at both {other} and {inst.id}")
            counts.update(holder.blocks)
        refcount = inst.kv.refcount
        held = {block: count for block, count in enumerate(refcount) if count}
        if held != dict(counts):
            wrong = sorted(set(held.items()) ^ set(counts.items()))[:3]
            raise InvariantError(f"{inst.id}: KV block references differ from their holders' "
                                 f"(block, count): {wrong}")
