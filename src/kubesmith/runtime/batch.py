"""One step of every request that is ready in the same event-loop iteration, run back to back.

Why: a CA worker interleaves many requests. Run one at a time, between other requests' TLS,
HTTP and SQLite work, each CSR check and each signature finds OpenSSL's tables and the code
that uses them evicted from the CPU caches and costs about twice what it costs in a loop; one
SQLite transaction per request pays its locks and WAL frames every time. So a request queues
such a step here and awaits it; the step runs once, for every request queued in that
iteration, when the loop next turns. Nothing waits for a timer or for more work: a lone request
is handled as before, only one loop turn later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class IterationBatch(Generic[Item, Result]):
    """`await batch(item)`: `process` sees the items of one loop iteration together.

    `process` returns one outcome per item, in order: the item's result, or the exception its
    caller gets. An exception raised by `process` itself reaches every caller of that batch.
    """

    def __init__(self, process: Callable[[Sequence[Item]], Sequence[Result | Exception]]) -> None:
        self._process = process
        self._queue: list[tuple[asyncio.Future[Result], Item]] = []

    async def __call__(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        if not self._queue:
            loop.call_soon(self._run)
        self._queue.append((future, item))
        return await future

    def _run(self) -> None:
        queue, self._queue = self._queue, []
        try:
            outcomes: Sequence[Result | Exception] = self._process([item for _, item in queue])
            if len(outcomes) != len(queue):
                raise RuntimeError(f"a batch of {len(queue)} items gave {len(outcomes)} outcomes")
        except Exception as exc:  # noqa: BLE001 - handed to every caller of this batch
            outcomes = [exc] * len(queue)
        for (future, _), outcome in zip(queue, outcomes):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)


def each(step: Callable[[Item], Result]) -> Callable[[Sequence[Item]], list[Result | Exception]]:
    """A batch `process` that applies `step` to every item; an item's exception is its outcome."""
    def process(items: Sequence[Item]) -> list[Result | Exception]:
        outcomes: list[Result | Exception] = []
        for item in items:
            try:
                outcomes.append(step(item))
            except Exception as exc:  # noqa: BLE001 - raised again in the item's caller
                outcomes.append(exc)
        return outcomes
    return process
