"""A session's timetable, in virtual time: sends and generation starts on the media clock, pauses that
shift it, and redirects and replacements tried only while a regeneration still fits before the send."""

from __future__ import annotations

from collections import deque

import msgspec
import pytest

from server.core.schedule import FINISH_SLACK_S, HANDOFF_S, ChunkSchedule, lead_for
from server.media import MediaClock
from streaming_model.world_backend import WorldBackend, WorldOptions
from tests.support.clock import VirtualClock

MEDIA = MediaClock(fps=16, chunk_frames=12)  # 0.75 s chunks: nothing here is the tiny model's 24 fps


def schedule(
    clock: VirtualClock, finish: deque[float] | None = None, lead: float = 1.0, aligned: bool = False
) -> ChunkSchedule:
    return ChunkSchedule(
        MEDIA,
        lead_chunks=lead,
        redirect=True,
        redirect_margin=1.25,
        finish_times=finish if finish is not None else deque(),
        clock=clock,
        aligned=aligned,
    )


def test_chunk_m_is_sent_at_t0_plus_m_chunks_and_generated_lead_chunks_before() -> None:
    clock = VirtualClock(100.0)
    s = schedule(clock, lead=1.5)
    s.begin(0.3)
    assert s.send_at(0) == pytest.approx(100.3)
    assert s.send_at(4) == pytest.approx(100.3 + 4 * 0.75)
    assert s.start_at(4) == pytest.approx(s.send_at(4) - 1.5 * 0.75)
    assert s.frame_at(13) == pytest.approx(100.3 + 13 / 16)  # frame 1 of chunk 1
    # Held for replacement while a regeneration would still be ready for its send (the next chunk's
    # making may begin then), or until the next chunk starts, if sooner.
    assert s.hand_at(4) == pytest.approx(min(s.start_at(5), s.send_at(4) - 1.25 * s.typical()))
    clock.advance(s.hand_at(4) + 1e-6)
    assert not s.time_to_redo(4)  # past hand_at(4), no regeneration of chunk 4 would be ready in time
    s.chunk_times.extend([0.0005] * 3)  # regenerations that take no time: held until just before the send
    assert s.hand_at(4) == pytest.approx(min(s.start_at(5), s.send_at(4) - HANDOFF_S))


def test_a_pause_shifts_the_media_clock_by_the_time_the_client_was_away() -> None:
    clock = VirtualClock()
    s = schedule(clock)
    s.begin(0.0)
    before = s.send_at(10)
    clock.advance(2.0)
    s.pause()
    clock.advance(9.5)
    s.pause()  # a second pause while away changes nothing
    s.resume()
    assert s.send_at(10) == pytest.approx(before + 7.5)
    s.resume()  # nor does a second return
    assert s.send_at(10) == pytest.approx(before + 7.5)


def test_a_generator_freeze_delays_the_media_clock_by_its_length() -> None:
    clock = VirtualClock()
    s = schedule(clock)
    s.begin(0.0)
    before = (s.send_at(10), s.frame_at(41), s.start_at(10))
    s.delay(0.6)
    assert (s.send_at(10), s.frame_at(41), s.start_at(10)) == pytest.approx(tuple(t + 0.6 for t in before))


def test_aligned_sessions_started_apart_send_and_start_their_chunks_together() -> None:
    def chunks_apart(a: float, b: float) -> float:
        return (b - a) / MEDIA.chunk_s

    clock = VirtualClock(100.1)
    first = schedule(clock, aligned=True)
    first.begin(0.3)
    assert first.send_at(0) == pytest.approx(100.5)  # the grid's next boundary: 134 chunks of 0.75 s
    clock.advance(clock.t + 0.4)
    second = schedule(clock, aligned=True)
    second.begin(0.3)
    assert second.send_at(0) == pytest.approx(101.25)
    assert second.start_at(3) == pytest.approx(first.start_at(4))  # in step: one batch for both
    clock.advance(clock.t + 1.0)
    second.pause()
    clock.advance(clock.t + 1.1)
    second.resume()  # back on the grid: at most a chunk later than the time away alone would say
    apart = chunks_apart(first.send_at(0), second.send_at(0))
    assert apart == pytest.approx(round(apart))
    assert 1.1 <= second.send_at(0) - 101.25 < 1.1 + MEDIA.chunk_s
    unaligned = schedule(clock)
    unaligned.begin(0.3)
    assert unaligned.send_at(0) == pytest.approx(clock.time() + 0.3)


def test_a_redo_is_tried_only_while_the_time_left_exceeds_the_margin_times_the_typical_chunk() -> None:
    clock = VirtualClock()
    s = schedule(clock)
    s.begin(0.0)
    s.chunk_times.extend([0.2, 0.4, 0.3])  # typical: 0.3 s, so a redo needs 0.375 s before the send
    assert s.typical() == pytest.approx(0.3)
    clock.advance(s.send_at(2) - 0.376)
    assert s.time_to_redo(2)
    clock.advance(s.send_at(2) - 0.374)
    assert not s.time_to_redo(2)


def test_without_chunk_times_a_chunk_is_taken_to_need_half_its_length() -> None:
    s = schedule(VirtualClock())
    s.begin(0.0)
    assert s.typical() == pytest.approx(MEDIA.chunk_s / 2)
    assert s.finish_s() == pytest.approx(MEDIA.chunk_s / 4)


def test_a_replacement_is_abandoned_when_only_the_time_to_finish_a_chunk_is_left() -> None:
    finish = deque([0.05] * 19 + [0.2])  # p95 of finishing: between the two
    s = schedule(VirtualClock(), finish)
    s.begin(0.0)
    p95 = s.finish_s()
    assert 0.05 < p95 < 0.2
    assert s.replace_deadline(3) == pytest.approx(s.send_at(3) - p95 - FINISH_SLACK_S)


def test_a_chunk_is_on_time_when_it_is_ready_by_its_send() -> None:
    s = schedule(VirtualClock())
    s.begin(0.0)
    assert s.on_time(2, s.send_at(2))
    assert not s.on_time(2, s.send_at(2) + 0.01)


def test_redirects_switched_off_are_never_tried() -> None:
    clock = VirtualClock()
    s = ChunkSchedule(
        MEDIA, lead_chunks=1.0, redirect=False, redirect_margin=1.25, finish_times=deque(), clock=clock
    )
    s.begin(10.0)
    assert not s.time_to_redo(5)


def test_the_lead_is_a_chunk_where_chunks_can_be_replaced_else_three_slow_chunks_between_half_and_one() -> (
    None
):
    manifest = WorldBackend(WorldOptions(fps=16, chunk_frames=12), warmup_chunks=1).manifest  # 0.75 s chunks

    def lead(p95_ms: float, finish_ms: float, replaces: bool = False, commit_ms: float = 0.0) -> float:
        costs = msgspec.structs.replace(
            manifest.costs, chunk_p95_ms=p95_ms, finish_p50_ms=finish_ms, commit_p50_ms=commit_ms
        )
        return lead_for(msgspec.structs.replace(manifest, costs=costs), replaces)

    assert lead(10.0, 0.0, replaces=True) == 1.0  # an early chunk is replaced when an input comes
    assert lead(100.0, 50.0) == pytest.approx(3 * 0.15 / 0.75)
    # A chunk's generation begins with the commit of the chunk before it.
    assert lead(100.0, 50.0, commit_ms=30.0) == pytest.approx(3 * 0.18 / 0.75)
    assert lead(10.0, 0.0) == 0.5  # a fast backend still leaves time to redirect
    assert lead(400.0, 100.0) == 1.0  # a slow one never generates more than a chunk ahead


def test_a_decision_may_wait_until_what_95_percent_of_recent_chunks_took_from_decision_to_ready() -> None:
    s = schedule(VirtualClock())
    s.begin(0.0)
    assert s.decide_by(2) == pytest.approx(s.send_at(2) - MEDIA.chunk_s / 2)  # nothing measured yet
    s.chunk_times.extend([0.05] * 20)  # regenerations are quick: they do not set the deadline
    s.made_times.extend([0.1] * 18 + [0.3, 0.6])  # a chunk's making, the commit before it included
    assert 0.1 < s.making_s() < 0.6
    assert s.decide_by(2) == pytest.approx(s.send_at(2) - s.making_s())
    assert s.decide_by(2) < s.send_at(2) - s.typical() * s.redirect_margin


def test_a_splice_reaches_the_first_unsent_frame_a_regeneration_is_ready_for_while_the_next_chunk_fits() -> (
    None
):
    clock = VirtualClock(100.0)
    s = schedule(clock)
    s.begin(0.0)
    s.chunk_times.extend([0.1] * 5)  # a regeneration takes 100 ms (a late one shows a frame later)
    s.produce_times.extend([0.2] * 5)  # making the chunk after it again: 200 ms
    # Decisions take longer (their redirects, and the splices of earlier reactions): not what a remake takes.
    s.made_times.extend([0.5] * 5)
    clock.advance(s.send_at(3) + 0.5 * MEDIA.frame_s)  # chunk 3 playing (62.5 ms frames): frame 0 out
    # Ready 100 ms on: frame 3 (187.5 ms after the send) is the first it reaches, though frame 1 is unsent.
    assert s.splice_from(3, 1, 12) == 3
    assert s.splice_from(3, 5, 12) == 5  # frames sent meanwhile are never spliced
    # The deadline leaves the chunk after it its making and finishing.
    assert s.splice_deadline(3, 12) == pytest.approx(s.send_at(4) - 0.2 - s.finish_s())
    # Too late in the chunk: the chunk after it could no longer be made again for its send.
    clock.advance(s.send_at(4) - 0.25)
    assert s.splice_from(3, 9, 12) is None


def test_nothing_is_spliced_without_redirects() -> None:
    clock = VirtualClock(100.0)
    s = ChunkSchedule(
        MEDIA, lead_chunks=1.0, redirect=False, redirect_margin=1.25, finish_times=deque(), clock=clock
    )
    s.begin(0.0)
    assert s.splice_from(0, 1, 12) is None
