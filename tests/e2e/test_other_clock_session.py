"""A real session on another model's clock and picture, end to end: the ``world`` backend at 16 fps with
12-frame 160x96 chunks (0.75 s each), opened from the options ``onstage serve --backend world
--backend-option fps=16 --backend-option chunk_frames=12 --backend-option width=160
--backend-option height=96`` gives, behind a real server on loopback, with a real local chat-completions
endpoint for the Director.

Real headless Chromium loads the real page: its canvas takes the session's size before any frame arrives,
it draws every frame it receives over all of it, and a gesture button is reflected by a later frame. A
Python client checks the clock on the wire (12 frames a chunk, pts 62.5 ms apart, audio_out_rate/16 samples
of voice with each frame), that a scripted plan's sync points land on the chunks that 0.75 s chunks put
them in (read from the pictures with the probes), and that the Director is offered only what the backend
can do.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from scipy.io import wavfile

from agent.director_config import DirectorConfig
from server.app import OnstageServer
from server.client import SessionClient, VideoFrame
from server.limits import Limits
from server.sessions import SessionFactory
from streaming_model.backends import open_backend, parse_options
from streaming_model.manifest import FRAME_SIZE
from streaming_model.probes import measure
from tests.e2e.browser import CHROMIUM, Page, chromium, event_ids, reflected, wait_for_log
from tests.support.llm_server import Call, LLMServer, Reply

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

OPTIONS = ["fps=16", "chunk_frames=12", "width=160", "height=96"]
"""The ``--backend-option`` values of the command line above."""
FPS, CHUNK_FRAMES, WIDTH, HEIGHT = 16, 12, 160, 96
FRAME_MS = 1000 / FPS  # 62.5
CHUNK_S = CHUNK_FRAMES / FPS  # 0.75
STILL = {"name": "still", "idle": {"actions": []}, "timeline": []}
"""A plan that does nothing by itself (no idle variety): what the pictures show is what was asked for."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def llm() -> AsyncIterator[LLMServer]:
    async with LLMServer() as server:
        yield server


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(factory: SessionFactory, llm: LLMServer) -> AsyncIterator[OnstageServer]:
    backend = await asyncio.to_thread(open_backend, "world", parse_options(OPTIONS))
    director = DirectorConfig(base_url=llm.base_url, api_key="test", model="test-model", debounce_s=0.05)
    sessions = SessionFactory(backend, factory.voice, factory.hearing, director=director)
    srv = OnstageServer(sessions, Limits(admission="ceiling", max_sessions=3, resume_grace_s=0.2))
    await srv.start("127.0.0.1", 0)
    yield srv
    # Bounded: a session whose tasks swallow their cancellation would otherwise hang the whole run.
    closing = asyncio.ensure_future(srv.close())
    done, _ = await asyncio.wait({closing}, timeout=15)
    assert done, "OnstageServer.close() did not return within 15 s"


@pytest.fixture
def url(server: OnstageServer) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/session"


# ---------------------------------------------------------------------------------------------- the page

WATCH = """
(() => {
  // Every canvas size the page sets, with how many binary (media) messages had arrived by then; and how
  // many video frames have arrived.
  window.sizesSet = [];
  window.videoReceived = 0;
  let media = 0;
  const Base = window.WebSocket;
  window.WebSocket = class extends Base {
    constructor(...args) {
      super(...args);  // this listener runs before the page's own onmessage
      this.addEventListener("message", (e) => {
        if (typeof e.data === "string") return;
        media += 1;
        if (new Uint8Array(e.data)[0] === 0x02) window.videoReceived += 1;  // the video frame kind
      });
    }
  };
  for (const side of ["width", "height"]) {
    const own = Object.getOwnPropertyDescriptor(HTMLCanvasElement.prototype, side);
    Object.defineProperty(HTMLCanvasElement.prototype, side, {
      ...own,
      set(value) { window.sizesSet.push([side, value, media]); own.set.call(this, value); },
    });
  }
})();
"""
"""Run before the page's scripts: shows whether the canvas was sized before any frame came."""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def page(server: OnstageServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Page]:
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: run scripts/setup-browser")
    mic = tmp_path_factory.mktemp("mic") / "silence.wav"
    wavfile.write(mic, 16_000, np.zeros(1600, dtype="<i2"))
    # Over the WebSocket the page itself paces and draws every frame (over WebRTC the browser's video
    # element does, and may skip frames: test_browser_rtc.py covers that transport).
    address = f"http://127.0.0.1:{server.port}/?autostart=1&seed=7&director=script&transport=ws"
    async with chromium(address, mic, before_page=WATCH) as browser:
        yield browser


async def test_the_page_sizes_its_canvas_from_the_session_and_draws_every_frame_over_all_of_it(
    page: Page,
) -> None:
    started = await page.wait_until("window.onstage && window.onstage.started")
    assert (started["width"], started["height"], started["fps"], started["chunk_frames"]) == (
        WIDTH,
        HEIGHT,
        FPS,
        CHUNK_FRAMES,
    )
    # Sized when the session started, before any media message had arrived.
    assert (await page.evaluate("window.sizesSet"))[:2] == [["width", WIDTH, 0], ["height", HEIGHT, 0]]
    # Three chunks' frames came; each is drawn at its time (pts on the 16 fps clock: the Python client's
    # test checks the spacing), none left out, however late a loaded machine delivers them.
    received = await page.wait_until(
        f"window.videoReceived >= {3 * CHUNK_FRAMES} && window.videoReceived", timeout=60
    )
    await page.wait_until(f"window.onstage.framesDrawn >= {received}", timeout=10)
    screen = "document.getElementById('screen')"
    assert await page.evaluate(f"[{screen}.width, {screen}.height]") == [WIDTH, HEIGHT]
    pixels = await page.evaluate(
        f"Array.from({screen}.getContext('2d').getImageData(0, 0, {WIDTH}, {HEIGHT}).data)"
    )
    rgba = np.asarray(pixels, dtype=np.float32).reshape(HEIGHT, WIDTH, 4)
    assert (rgba[..., 3] == 255).all(), "part of the canvas was never drawn"
    assert rgba[..., :3].std() > 10.0, "the canvas is blank (one flat colour)"


async def test_a_gesture_button_is_accepted_and_a_later_frame_reflects_it(page: Page) -> None:
    await page.wait_until("!document.querySelector('[data-gesture=wave]').disabled")
    await page.click("[data-gesture=wave]")
    log = await wait_for_log(page, lambda log: event_ids(log, "input.accepted", kind="gesture"))
    (gesture,) = event_ids(log, "input.accepted", kind="gesture")
    # Within the chunk in flight or the next (0.75 s each), and slack for a loaded machine.
    log = await wait_for_log(page, lambda log: gesture in reflected(log), timeout=10)
    accepted_at = next(i for i, line in enumerate(log) if f'"event_id":"{gesture}"' in line)
    reacted_at = next(i for i, line in enumerate(log) if gesture in reflected([line]))
    assert reacted_at > accepted_at
    assert page.errors == []


async def test_the_scene_panel_lists_the_worlds_parts_and_follows_a_set_scene(page: Page) -> None:
    def shown(part: str) -> str:
        return f"document.getElementById('scene-{part}').textContent"

    assert await page.evaluate("document.getElementById('scene-panel').hidden") is False
    assert await page.evaluate(f"[{shown('light')}, {shown('weather')}]") == ["day", "clear"]
    night = {"kind": "set_scene", "changes": {"light": "night"}}
    plan = {"name": "night", "timeline": [{"at_s": 0.0, "behaviors": [night]}]}
    message = json.dumps({"type": "plan.run", "plan": plan})
    await page.evaluate(f"window.onstage.ws.send(JSON.stringify({message}))")  # the page has no plan button
    await page.wait_until(f"{shown('light')} === 'night'", timeout=10)
    assert await page.evaluate(shown("weather")) == "clear"  # a part not named stays at its default
    assert page.errors == []


# ------------------------------------------------------------------------------------------- the wire


def world_pictures(frames: np.ndarray) -> np.ndarray:
    """160x96 world frames as the 128x128 pictures the probes read: the world draws its 128x128 render
    scaled by 0.75 and centred (``streaming_model.world_backend``); each world pixel is taken back from the
    output pixel nearest to it."""
    scale = min(WIDTH, HEIGHT) / FRAME_SIZE
    back = np.floor((np.arange(FRAME_SIZE) + 0.5) * scale).astype(np.int64)
    rows = back + (HEIGHT - round(FRAME_SIZE * scale)) // 2
    cols = back + (WIDTH - round(FRAME_SIZE * scale)) // 2
    return frames[:, rows[:, None], cols[None, :]]


def least_frames(action: str) -> int:
    """How many of a chunk's frames must show ``action`` for the chunk to count as showing it: most of
    them, but for a jump a third: a held jump is airborne 14 frames in every 18 (the world's jump cycle),
    so a chunk that catches the landing shows it in only 5 to 7 of its 12, and the chunk after a jump
    ends shows the fall in at most 2."""
    return CHUNK_FRAMES // 3 if action == "jump" else CHUNK_FRAMES // 2


def shown(client: SessionClient, chunks: range) -> list[str]:
    """What each chunk shows, as the probes read its frames: jump, sit, wave or idle (most frames)."""
    by_chunk: dict[int, list[VideoFrame]] = {}
    for f in client.received.video:
        by_chunk.setdefault(f.header["chunk"], []).append(f)
    out = []
    for k in chunks:
        frames = by_chunk[k]
        assert len(frames) == CHUNK_FRAMES
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # empty masks in some frames: NaN measures
            m = measure(world_pictures(client.received.pictures(frames)), 0)
        counts = {"jump": m.jumping.sum(), "sit": m.sitting.sum(), "wave": (m.paw_left | m.paw_right).sum()}
        best = max(counts, key=lambda a: counts[a])
        out.append(best if counts[best] > least_frames(best) else "idle")
    return out


async def test_frames_and_voice_go_out_on_the_sessions_clock_a_slice_of_voice_per_frame(url: str) -> None:
    async with SessionClient(url) as client:
        started = await client.start(seed=3, director="script")  # the greeter says hello at 0.5 s
        await client.wait_type("character.speech", state="started", timeout=20)
        await client.wait_type("character.speech", state="ended", timeout=20)
        last = client.received.video[-1].header["chunk"]
        await client.wait_frame(lambda f: f.header["chunk"] >= last + 2, timeout=10)
    per_frame, rest = divmod(started["audio_out_rate"], FPS)
    assert rest == 0
    video, audio = client.received.video, client.received.audio
    for i, f in enumerate(video):
        h = f.header
        assert (h["chunk"], h["frame"], h["width"], h["height"]) == (
            i // CHUNK_FRAMES,
            i % CHUNK_FRAMES,
            WIDTH,
            HEIGHT,
        )
        assert h["pts_ms"] == pytest.approx(i * FRAME_MS)
    assert {a.header["samples"] for a in audio} == {per_frame}
    assert all(len(a.pcm) == 2 * per_frame for a in audio)
    assert [a.header["pts_ms"] for a in audio] == pytest.approx([i * FRAME_MS for i in range(len(audio))])
    # The voice was sent with the frames, and the mouth in them follows it.
    voice = client.received.voice_loudness()
    talking = voice > 0
    assert talking.sum() >= FPS  # "Hi! Nice to meet you." lasts more than a second
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mouth = measure(world_pictures(client.received.pictures()), 0).mouth
    assert np.corrcoef(voice[talking], np.nan_to_num(mouth[talking]))[0, 1] > 0.5


WAVE_BACK = {
    "name": "wave_back",
    "idle": {"actions": []},
    "timeline": [],
    "trigger": [
        {
            "on": "gesture",
            "gesture": "wave",
            "behaviors": [{"kind": "action", "name": "wave", "duration_s": 2 * CHUNK_S}],
        }
    ],
}


async def test_the_chunk_that_reflects_a_gesture_is_the_first_that_shows_the_answer(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=2, director="script", plan=WAVE_BACK)
        await client.wait_frame(lambda f: f.header["chunk"] >= 1, timeout=20)
        await client.send({"type": "input.gesture", "gesture": "wave", "ref": "g"})
        gesture = (await client.wait_type("input.accepted", ref="g"))["event_id"]
        first = await client.wait_frame(lambda f: gesture in f.header["reflects"], timeout=10)
        k = first.header["chunk"]
        await client.wait_frame(lambda f: f.header["chunk"] >= k + 1, timeout=10)
        assert first.header["frame"] == 0
        assert shown(client, range(k - 1, k + 1)) == ["idle", "wave"]


SYNC = {
    "name": "sync_points",
    "idle": {"actions": []},
    "timeline": [
        {
            "at_s": 0.0,
            "behaviors": [
                {"kind": "action", "id": "j", "name": "jump", "duration_s": CHUNK_S},
                # 0.75 s after the jump ends: two chunks after it starts.
                {
                    "kind": "action",
                    "name": "wave",
                    "duration_s": CHUNK_S,
                    "start": {"to": "j", "point": "end", "offset_s": CHUNK_S},
                },
            ],
        },
        {"at_s": 3.0, "behaviors": [{"kind": "action", "name": "sit", "duration_s": CHUNK_S}]},
    ],
}
"""Sync points at 0, 1.5 and 3 s: chunks +0, +2 and +4 at 0.75 s a chunk (+0, +9, +18 at 24 fps / 4)."""


async def test_a_scripted_plans_sync_points_land_on_the_chunks_of_their_seconds(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(seed=4, director="script", plan=STILL)
        await client.wait_frame(lambda f: f.header["chunk"] >= 1, timeout=20)
        await client.send({"type": "plan.run", "plan": SYNC, "ref": "p"})
        await client.wait_type("input.accepted", ref="p")
        sent = client.received.video[-1].header["chunk"]  # the last chunk out when the plan was taken
        await client.wait_frame(lambda f: f.header["chunk"] >= sent + 9, timeout=20)
        seen = shown(client, range(sent, sent + 9))
    # The timeline starts with the next chunk the minds decide: generation runs about a chunk ahead.
    assert "jump" in seen, seen
    begin = seen.index("jump")
    assert begin <= 3, seen
    assert seen[: begin + 6] == ["idle"] * begin + ["jump", "idle", "wave", "idle", "sit", "idle"]


def enums(schema: Any) -> list[list[str]]:
    """Every ``enum`` list inside a JSON schema, each sorted."""
    if isinstance(schema, dict):
        own = [sorted(schema["enum"])] if "enum" in schema else []
        return own + [e for v in schema.values() for e in enums(v)]
    if isinstance(schema, list):
        return [e for v in schema for e in enums(v)]
    return []


async def test_the_director_is_offered_only_what_the_backend_can_do(url: str, llm: LLMServer) -> None:
    llm.enqueue(Reply(tool_calls=[Call("perform", {"action": "jump", "duration_s": 1.5})]), Reply(text=""))
    before = len(llm.requests)
    async with SessionClient(url) as client:
        started = await client.start(seed=5, director="llm", plan=STILL)
        await client.wait_frame(lambda f: f.header["chunk"] >= 1, timeout=20)
        await client.send({"type": "input.text", "text": "Jump for me!"})
        request = (await asyncio.wait_for(llm.wait_for_requests(before + 1), 30))[before]
        plan = await client.wait_type("director.plan", timeout=30)
        assert plan["summary"] == "perform jump"
        jumped = client.received.video[-1].header["chunk"]
        await client.wait_frame(lambda f: f.header["chunk"] >= jumped + 6, timeout=20)
        seen = shown(client, range(jumped, jumped + 6))
    assert seen.count("jump") == 2, seen  # 1.5 s: two chunks of 0.75 s
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in request["tools"]}
    actions, emotions = (
        sorted(started["capabilities"]["actions"]),
        sorted(started["capabilities"]["emotions"]),
    )
    assert enums(tools["perform"]["properties"]["action"]) == [actions]
    assert enums(tools["say"]["properties"]["gesture"]) == [actions]
    assert enums(tools["set_emotion"]["properties"]["emotion"]) == [emotions]
    assert "scene_event" not in tools  # the world draws no scene events
    assert "move_to" in tools and "turn_head" in tools["look_at"]["properties"]  # it walks, turns its head
