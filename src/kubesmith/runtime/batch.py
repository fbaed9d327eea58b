"""One step of the requests that a worker is handling together, run back to back.

Why: a CA worker interleaves many requests. Run one at a time, between other requests' TLS,
HTTP and SQLite work, each CSR check and each signature finds the code and data it uses
(OpenSSL's tables, `cryptography`'s and the interpreter's paths) evicted from the CPU caches and
costs up to twice what it costs in a loop; one SQLite transaction per request pays its locks and
WAL frames every time. So a request queues such a step here and awaits it, and the step runs
once for the whole queue. The queue runs once the requests being read have joined it: when an
event-loop turn has added nothing to it, or after `max_turns` turns. No timer: under load the
worker moves its requests through each step in waves; a lone request runs two turns later.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class IterationBatch(Generic[Item, Result]):
    """`await batch(item)`: `process` sees the items queued in the same few loop turns together.

    `process` returns one outcome per item, in order: the item's result, or the exception its
    caller gets. An exception raised by `process` itself reaches every caller of that batch.
    """

    def __init__(self, process: Callable[[Sequence[Item]], Sequence[Result | Exception]],
                 max_turns: int = 4) -> None:  # ca_bench: 1 to 8 alike; 16 cost 8% more CPU
        self._process = process
        self._max_turns = max_turns
        self._queue: list[tuple[asyncio.Future[Result], Item]] = []
        self._seen = 0  # queue length at the last turn
        self._turns = 0  # turns the queue has waited

    async def __call__(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        if not self._queue:
            self._seen, self._turns = 0, 0
            loop.call_soon(self._run_when_settled, loop)
        self._queue.append((future, item))
        return await future

    def _run_when_settled(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the queue once a turn has added nothing to it, or after `max_turns` turns."""
        if len(self._queue) > self._seen and self._turns < self._max_turns:
            self._seen, self._turns = len(self._queue), self._turns + 1
            loop.call_soon(self._run_when_settled, loop)
            return
        self._run()

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
