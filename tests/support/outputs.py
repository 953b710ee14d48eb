"""A session's outputs as a test receives them: a ``Sink`` that keeps every typed output."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from server.core.outputs import Output

WAIT_S = 30.0


class Script:
    """The session's outputs as they come, and a wait for the first that a test names."""

    def __init__(self) -> None:
        self.outputs: list[Output] = []
        self._changed = asyncio.Event()

    async def __call__(self, item: Output) -> None:
        self.outputs.append(item)
        self._changed.set()

    async def first(self, predicate: Callable[[Output], bool]) -> Output:
        async def find() -> Output:
            while True:
                self._changed.clear()
                for item in self.outputs:
                    if predicate(item):
                        return item
                await self._changed.wait()

        return await asyncio.wait_for(find(), WAIT_S)
