"""Re-deciding the chunk in flight is a transaction, and every input a block was given gets an outcome."""

from __future__ import annotations

import pytest

from agent.idle import IdleConfig, IdleVariety
from agent.plans import Action, Block, Gaze, Source
from agent.progress import BlockStarted, InputUnshown
from agent.realizer import Realizer
from events.bus import EventBus, Subscription
from events.vocabulary import Event
from tests.support.events import only


def drain(sub: Subscription) -> list[Event]:
    events = []
    while (event := sub.get_nowait()) is not None:
        events.append(event)
    return events


def quiet() -> Realizer:
    return Realizer(EventBus(), idle=IdleVariety(IdleConfig(actions=())))


def wave(cause: str, source: Source = "reflex", epoch: int = 0) -> Block:
    return Block(behaviors=[Action(name="wave", duration_s=1.0)], source=source, cause=cause, epoch=epoch)


def test_a_discarded_proposal_leaves_no_trace_and_its_input_shows_in_the_next_chunk() -> None:
    realizer = quiet()
    assert realizer.bus is not None
    progress = realizer.bus.subscribe()
    realizer.tick(0)
    drain(progress)
    realizer.submit(wave("e1"))
    proposal = realizer.propose(0)
    assert proposal.output.condition.action == "wave" and proposal.output.reflects == ("e1",)
    realizer.discard(proposal)
    assert drain(progress) == []  # the block's start was never reported
    nxt = realizer.tick(1)
    assert nxt.condition.action == "wave" and nxt.reflects == ("e1",)
    assert [e.chunk for e in drain(progress) if isinstance(e, BlockStarted)] == [1]


def test_a_committed_proposal_is_the_chunks_decision_and_reports_once() -> None:
    realizer = quiet()
    assert realizer.bus is not None
    progress = realizer.bus.subscribe()
    realizer.tick(0)
    realizer.submit(wave("e1"))
    proposal = realizer.propose(0)
    assert drain(progress) == []  # held back until committed
    assert realizer.commit(proposal).reflects == ("e1",)
    assert [e.chunk for e in drain(progress) if isinstance(e, BlockStarted)] == [0]
    assert realizer.tick(1).reflects == ()  # already reflected by chunk 0


def test_nothing_touches_the_realizer_while_a_proposal_is_open() -> None:
    realizer = quiet()
    realizer.tick(0)
    proposal = realizer.propose(0)
    with pytest.raises(RuntimeError):
        realizer.submit(wave("e2"))
    with pytest.raises(RuntimeError):
        realizer.tick(1)
    realizer.discard(proposal)
    with pytest.raises(RuntimeError):
        realizer.commit(proposal)  # settled once only
    realizer.submit(wave("e2"))


def test_only_the_last_ticked_chunk_can_be_re_decided() -> None:
    realizer = quiet()
    realizer.tick(0)
    with pytest.raises(ValueError):
        realizer.propose(1)


def test_an_interrupt_is_reflected_by_the_next_chunk_decided() -> None:
    realizer = quiet()
    realizer.submit(wave("e1", source="script"))
    assert realizer.tick(0).condition.action == "wave"
    realizer.interrupt(cause="e9")
    out = realizer.tick(1)
    assert out.condition.action == "idle" and out.reflects == ("e9",)
    assert realizer.tick(2).reflects == ()


def test_an_input_whose_only_block_is_outranked_all_its_life_is_reported_unshown() -> None:
    realizer = quiet()
    assert realizer.bus is not None
    unshown = realizer.bus.subscribe(InputUnshown)
    held = Block(behaviors=[Action(name="sit", duration_s=2.0)], source="user", cause="u1")
    realizer.submit(held)
    realizer.submit(wave("e1"))  # a reflex wave under a user command on the body
    outs = [realizer.tick(k) for k in range(20)]
    assert all("e1" not in out.reflects for out in outs)
    [event] = drain(unshown)
    assert isinstance(event, InputUnshown) and event.cause == "e1" and event.reason == "outranked"


def test_an_input_shown_by_one_block_gets_no_unshown_report_when_another_dies() -> None:
    realizer = quiet()
    assert realizer.bus is not None
    unshown = realizer.bus.subscribe(InputUnshown)
    realizer.submit(Block(behaviors=[Gaze(x=0.5, y=0.0, duration_s=0.5)], source="reflex", cause="e1"))
    realizer.submit(wave("e1"))
    assert "e1" in realizer.tick(0).reflects
    for k in range(1, 20):
        realizer.tick(k)
    assert drain(unshown) == []


def test_a_stale_block_tells_its_input_will_not_show() -> None:
    realizer = quiet()
    assert realizer.bus is not None
    unshown = realizer.bus.subscribe(InputUnshown)
    realizer.advance_epoch("reflex")
    realizer.submit(wave("e1", epoch=0))
    [event] = drain(unshown)
    assert isinstance(event, InputUnshown) and (event.cause, event.reason) == ("e1", "stale")
    assert realizer.caused("e1") and not realizer.caused("e2")


def test_a_rewind_past_an_input_that_has_not_shown_yet_tells_it_is_stale() -> None:
    realizer = quiet()
    assert realizer.bus is not None
    unshown = realizer.bus.subscribe(InputUnshown)
    realizer.tick(0)
    checkpoint = realizer.snapshot()
    realizer.submit(wave("e1"))
    assert "e1" in realizer.tick(1).reflects  # e1 showed before the rewind
    realizer.submit(wave("e2"))  # e2 waits for the next chunk when the story goes back
    realizer.restore(checkpoint)
    told = only(InputUnshown, drain(unshown))
    assert [(e.cause, e.reason) for e in told] == [("e2", "stale")]
