"""Gestures seen by the user's camera, in headless Chromium: per gesture of the footage, detected or not and
its reaction latency, beside a gesture button's; false gestures per minute of footage without any.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/camera.py                  # 3 passes, 2 idle minutes
    PYTHONPATH=$PWD .venv/bin/python benchmarks/camera.py --passes 5 --idle-minutes 4
    PYTHONPATH=$PWD .venv/bin/python benchmarks/camera.py --record tests/data/camera
    scripts/loaded env PYTHONPATH=$PWD .venv/bin/python benchmarks/camera.py --record tests/data/camera \
        --record-suffix _loaded                                           # on a loaded machine

The server is ``onstage serve`` in its own process (benchmarks/served.py); the page is the one users open,
with its camera switched on a few seconds into the call (the Camera button; over the WebSocket), the
camera a Y4M file that Chromium plays
in a loop: tests/camera_footage.py's footage (made, not filmed: it says how), watched from inside the page
by tests/e2e/camera.py. Times are the page's ``performance.now()``.

- Onset: the first time the page's models looked at the frame where a gesture is fully shown (the hand up
  in its pose, the head's first swing), or a later frame of the same pass. The page looks about a dozen
  times a second, so this is up to a frame (83 ms) after the camera delivered the onset.
- Reaction: from the onset to the page drawing the first frame whose ``reflects`` names the gesture's
  event; ``recognised`` is the part until the frame whose landmarks completed the gesture (the gesture's
  own length: a wave needs two swings, a point is held 300 ms, a raised hand 600 ms).
- Button: from a click on a gesture button (camera off) to the same kind of frame, for comparison.
- Detected: a gesture of the right name whose completing frame lies in the gesture's part of the footage
  (or half a second after it), in each pass that showed all of that part; a gesture recognised anywhere
  else in the footage is a false one.
- ``--record DIR``: also writes one pass of each footage's landmark frames, as the page sent them, with the
  footage frame each came from (``gestures.json``, ``no_gestures.json``, their names ending in
  ``--record-suffix``: tests/events/test_camera_gestures.py reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from served import served

from server.client_cli import percentiles
from tests import camera_footage
from tests.camera_footage import Segment
from tests.e2e.browser import CHROMIUM, Page, chromium
from tests.e2e.camera import Seen, Watched, watch_script, watched

SERVER_CONFIG = """
[server.limits]
max_sessions = 1
resume_grace_s = 0.2
"""
BUTTONS = ("wave", "thumbs_up", "raise_hand", "nod")
RELEASE_FRAMES = camera_footage.FPS // 2
"""A gesture completed this many frames after its part of the footage still counts (the page lags)."""


async def run_footage(base: str, script: tuple[Segment, ...], seconds: float, tmp: Path) -> Watched:
    """The page with ``script``'s footage as its camera for ``seconds`` after its camera came on."""
    footage = await asyncio.to_thread(camera_footage.write_y4m, tmp / "footage.y4m", script)
    silence = tmp / "silence.wav"
    wavfile.write(silence, 16000, np.zeros(16000, dtype="<i2"))
    url = f"{base}/?autostart=1&transport=ws&seed=5"
    flags = (f"--use-file-for-fake-video-capture={footage}",)
    async with chromium(url, silence, before_page=watch_script(), flags=flags) as page:
        # The camera goes on once the call is under way, as a user switches it on: the page fixes its
        # play clock at the first frame, and the models' loading would delay that frame for good.
        await page.wait_until("window.onstage && window.onstage.framesDrawn >= 48", timeout=60)
        await page.click("#camera")
        await page.wait_until("window.onstage.camera.on", timeout=60)
        await asyncio.sleep(seconds)
        result = await watched(page)
        if script == camera_footage.GESTURES:
            result.lines.extend(await buttons(page))
        if page.errors:
            print(f"(the page threw: {page.errors[:3]})")
        return result


async def buttons(page: Page, rounds: int = 3) -> list[tuple[float, str]]:
    """Clicks on gesture buttons with the camera off; their lines ("button <gesture> <t> <event id>") and
    the page's log lines after them."""
    await page.click("#camera")  # off: the buttons alone
    before = len((await watched(page)).lines)
    clicks = []
    for _ in range(rounds):
        for gesture in BUTTONS:
            await asyncio.sleep(2.6)  # past the reflex's cooldown for this gesture
            t = await page.evaluate(
                f"(() => {{ const t = performance.now(); document.querySelector('[data-gesture={gesture}]').click();"
                " return t; })()"
            )
            clicks.append((t, gesture))
    await asyncio.sleep(2.0)
    lines = (await watched(page)).lines[before:]
    # Each click's event id is in the input.accepted that follows it, in order.
    accepted = [
        json.loads(text.split(" ", 2)[2])["event_id"] for _, text in lines if " input.accepted " in text
    ]
    return [(t, f"button {g} {e}") for (t, g), e in zip(clicks, accepted, strict=False)] + lines


def runs(watch: Watched) -> list[tuple[float, float, int, int]]:
    """The passes of the footage the models looked at, whole or not: (first and last page time, first
    and last footage frame) of each."""
    out: list[tuple[float, float, int, int]] = []
    start = 0
    for k in range(1, len(watch.marks) + 1):
        if k == len(watch.marks) or watch.marks[k][1] < watch.marks[k - 1][1]:
            run = watch.marks[start:k]
            out.append((run[0][0], run[-1][0], run[0][1], run[-1][1]))
            start = k
    return out


def parts(script: tuple[Segment, ...]) -> dict[str, tuple[int, int]]:
    """Each gesture's frames in the footage: its segment, and ``RELEASE_FRAMES`` after it."""
    where: dict[str, tuple[int, int]] = {}
    frame = 0
    for segment in script:
        n = round(segment.seconds * camera_footage.FPS)
        where[segment.what] = (frame, frame + n + RELEASE_FRAMES)
        frame += n
    return where


def score(watch: Watched, script: tuple[Segment, ...]) -> tuple[dict[str, list], list[Seen], int]:
    """Per gesture, for each pass that showed all of it: (onset-to-reflection ms or None, onset-to-completion
    ms), None where missed; the gestures seen where the footage does not show them; how many passes."""
    where = parts(script)
    onset_frames = {g: round(s * camera_footage.FPS) for g, s in camera_footage.onsets(script)}
    seen = watch.seen()
    results: dict[str, list] = {g: [] for g in onset_frames}
    for start, end, first_frame, last_frame in runs(watch):
        for gesture, onset in onset_frames.items():
            first, last = where[gesture]
            if first < first_frame or last - RELEASE_FRAMES > last_frame:
                continue  # this pass did not show the whole gesture
            t_onset = watch.first_shown(onset, after_ms=start - 1)
            hit = next(
                (
                    s
                    for s in seen
                    if s.gesture == gesture
                    and start <= s.t_ms <= end
                    and first <= (watch.frame_at(s.t_ms) or -1) <= last
                ),
                None,
            )
            if hit is None or t_onset is None:
                results[gesture].append(None)
                continue
            reaction = None if hit.reflected_ms is None else hit.reflected_ms - t_onset
            results[gesture].append((reaction, hit.t_ms - t_onset))
    false = [
        s
        for s in seen
        if not where.get(s.gesture, (0, -1))[0]
        <= (watch.frame_at(s.t_ms) or -1)
        <= where.get(s.gesture, (0, -1))[1]
    ]
    return results, false, len(runs(watch))


def button_reactions(lines: list[tuple[float, str]]) -> list[float]:
    shown: dict[str, float] = {}
    for t, text in lines:
        if "reflects " in text:
            for event_id in text.split("reflects ", 1)[1].split(", "):
                shown.setdefault(event_id, t)
    out = []
    for t, text in lines:
        if text.startswith("button "):
            event_id = text.split()[2]
            if event_id in shown:
                out.append(shown[event_id] - t)
    return out


def record(watch: Watched, script: tuple[Segment, ...], path: Path) -> None:
    """One whole pass of the landmark frames the page sent, with the footage frame of each."""
    whole = round(camera_footage.duration_s(script) * camera_footage.FPS) - 2
    start, end, _, _ = next(r for r in runs(watch) if r[2] <= 1 and r[3] >= whole)
    frames = [
        {"frame": watch.frame_at(m["t_ms"]), **m}
        for m in watch.landmarks()
        if start <= m["t_ms"] <= end and watch.frame_at(m["t_ms"]) is not None
    ]
    for f in frames:  # three decimals: a thousandth of the picture is below the models' own noise
        del f["type"]
        for key in ("hand", "face"):
            if f[key] is not None:
                f[key] = [[round(x, 3), round(y, 3)] for x, y in f[key]]
    text = json.dumps({"fps": camera_footage.FPS, "frames": frames}, separators=(",", ":"))
    path.write_text(text + "\n")
    print(f"(wrote {len(frames)} frames to {path})")


def p50_p95(values: list[float]) -> str:
    spread = percentiles(values)
    return "-" if spread is None else f"{spread[0]:.0f} / {spread[1]:.0f}"


def table(results: dict[str, list], buttons_ms: Sequence[float]) -> list[str]:
    rows = [
        "| gesture | detected | reaction p50 / p95 (ms) | recognised after p50 (ms) |",
        "|---|---|---|---|",
    ]
    for gesture, trials in results.items():
        hits = [t for t in trials if t is not None]
        reactions = [r for r, _ in hits if r is not None]
        recognised = f"{np.median([c for _, c in hits]):.0f}" if hits else "-"
        rows.append(f"| {gesture} | {len(hits)} of {len(trials)} | {p50_p95(reactions)} | {recognised} |")
    rows.append(f"| (a gesture button) | {len(buttons_ms)} clicks | {p50_p95(list(buttons_ms))} | - |")
    return rows


async def main(args: argparse.Namespace) -> None:
    gesture_s = camera_footage.duration_s(camera_footage.GESTURES) * (args.passes + 1)
    async with served(SERVER_CONFIG) as base:
        with tempfile.TemporaryDirectory() as tmp:
            watch = await run_footage(base, camera_footage.GESTURES, gesture_s, Path(tmp))
            await asyncio.sleep(0.5)  # past the resume grace: the next page's session is a new one
            idle = await run_footage(base, camera_footage.NO_GESTURES, args.idle_minutes * 60, Path(tmp))
    if args.record is not None:
        record(watch, camera_footage.GESTURES, args.record / f"gestures{args.record_suffix}.json")
        record(idle, camera_footage.NO_GESTURES, args.record / f"no_gestures{args.record_suffix}.json")
    results, false, n = score(watch, camera_footage.GESTURES)
    idle_minutes = (idle.marks[-1][0] - idle.marks[0][0]) / 60000 if idle.marks else 0.0
    print(f"## Camera gestures in headless Chromium ({n} passes of the gesture footage, whole or not)\n")
    print("\n".join(table(results, button_reactions(watch.lines))) + "\n")
    print(
        f"False gestures: {len(false)} in the gesture footage ({[s.gesture for s in false]}); "
        f"{len(idle.seen())} in {idle_minutes:.1f} minutes of footage without any "
        f"({len(idle.seen()) / idle_minutes if idle_minutes else float('nan'):.2f} a minute: "
        f"{[s.gesture for s in idle.seen()]})."
    )
    frames = len(watch.marks) / ((watch.marks[-1][0] - watch.marks[0][0]) / 1000) if watch.marks else 0.0
    print(f"The page's models looked at {frames:.1f} frames a second.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passes", type=int, default=3, help="whole passes of the gesture footage")
    parser.add_argument("--idle-minutes", type=float, default=2.0, help="footage without gestures")
    parser.add_argument("--record", type=Path, help="write one pass of each footage's landmarks here")
    parser.add_argument("--record-suffix", default="", help="ends the recordings' names (e.g. _loaded)")
    if not CHROMIUM.exists():
        raise SystemExit("no /usr/bin/chromium: run scripts/setup-browser")
    asyncio.run(main(parser.parse_args()))
