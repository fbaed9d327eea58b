"""`runtime.batch.IterationBatch`: the CA workers' batched request steps."""

from __future__ import annotations

import asyncio

import pytest

from kubesmith.runtime.batch import IterationBatch, each


def square_or_refuse(item: int) -> int:
    if item < 0:
        raise ValueError(f"negative: {item}")
    return item * item


class Recorder:
    """A batch `process` that remembers the batches it saw."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, items: list[int]) -> list[int | Exception]:
        self.batches.append(list(items))
        return each(square_or_refuse)(items)


def test_calls_ready_in_one_iteration_run_together_and_each_caller_gets_its_own_outcome():
    recorder = Recorder()
    batch: IterationBatch[int, int] = IterationBatch(recorder)

    async def scenario() -> list[object]:
        return await asyncio.gather(*(batch(item) for item in (1, 2, -3, 4)), return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert recorder.batches == [[1, 2, -3, 4]]
    assert outcomes[:2] == [1, 4] and outcomes[3] == 16
    assert isinstance(outcomes[2], ValueError) and str(outcomes[2]) == "negative: -3"


async def after_turns(batch: IterationBatch[int, int], item: int, turns: int) -> int:
    """Call `batch` after `turns` event-loop turns (a request whose body arrives later)."""
    for _ in range(turns):
        await asyncio.sleep(0)
    return await batch(item)


def test_calls_queued_in_the_next_turns_join_the_batch_until_a_turn_adds_none():
    recorder = Recorder()
    batch: IterationBatch[int, int] = IterationBatch(recorder)

    async def scenario() -> list[int]:
        calls = ((1, 0), (2, 1), (3, 2), (4, 6))  # (item, turns before the call)
        return await asyncio.gather(*(after_turns(batch, item, turns) for item, turns in calls))

    assert asyncio.run(scenario()) == [1, 4, 9, 16]
    assert recorder.batches == [[1, 2, 3], [4]]


def test_a_queue_that_grows_every_turn_runs_after_max_turns():
    recorder = Recorder()
    batch: IterationBatch[int, int] = IterationBatch(recorder, max_turns=2)

    async def scenario() -> list[int]:
        return await asyncio.gather(*(after_turns(batch, item, item) for item in range(6)))

    assert asyncio.run(scenario()) == [0, 1, 4, 9, 16, 25]
    assert recorder.batches == [[0, 1, 2], [3, 4, 5]]


def test_a_call_after_the_batch_ran_starts_the_next_batch():
    recorder = Recorder()
    batch: IterationBatch[int, int] = IterationBatch(recorder)

    async def scenario() -> list[int]:
        first = await batch(2)
        second = await asyncio.gather(batch(3), batch(5))
        return [first, *second]

    assert asyncio.run(scenario()) == [4, 9, 25]
    assert recorder.batches == [[2], [3, 5]]


def test_a_failing_process_reaches_every_caller_of_its_batch():
    def broken(items: list[int]) -> list[int]:
        raise OSError("database is gone")

    batch: IterationBatch[int, int] = IterationBatch(broken)

    async def scenario() -> list[object]:
        return await asyncio.gather(batch(1), batch(2), return_exceptions=True)

    assert [str(outcome) for outcome in asyncio.run(scenario())] == ["database is gone"] * 2


def test_a_process_that_loses_an_outcome_fails_loudly():
    batch: IterationBatch[int, int] = IterationBatch(lambda items: list(items)[1:])

    async def scenario() -> list[object]:
        return await asyncio.gather(batch(1), batch(2), return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, RuntimeError) and "2 items gave 1 outcomes" in str(o) for o in outcomes)


def test_a_cancelled_caller_leaves_the_others_their_outcomes():
    recorder = Recorder()
    batch: IterationBatch[int, int] = IterationBatch(recorder)

    async def scenario() -> tuple[int, bool]:
        doomed = asyncio.ensure_future(batch(7))
        kept = asyncio.ensure_future(batch(8))
        await asyncio.sleep(0)  # both are queued
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return await kept, doomed.cancelled()

    assert asyncio.run(scenario()) == (64, True)
    assert recorder.batches == [[7, 8]]
