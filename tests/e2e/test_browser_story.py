"""The browser page shows the story: the current beat, choices as buttons, an intervention box, the history
with rewind. Real server, real headless Chromium, clicks as a user makes them."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

from server.app import OnstageServer
from server.limits import Limits
from server.sessions import SessionFactory
from tests.e2e.browser import CHROMIUM, Page, chromium
from tests.e2e.test_browser import microphone_wav

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: run scripts/setup-browser"),
]

BEAT = "document.querySelector('#story p') && document.querySelector('#story p').textContent"
CHOICES = "[...document.querySelectorAll('#story .choices button')].map(b => b.textContent)"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def page(tmp_path_factory: pytest.TempPathFactory, factory: SessionFactory):
    server = OnstageServer(factory, Limits(max_sessions=1))
    await server.start("127.0.0.1", 0)
    wav = microphone_wav(tmp_path_factory.mktemp("mic") / "mic.wav")
    url = f"http://127.0.0.1:{server.port}/?autostart=1&story=garden_gate&director=script&seed=3"
    try:
        async with chromium(url, wav) as page:
            yield page
    finally:
        await server.close()


async def test_the_story_panel_shows_the_beat_and_its_choices_as_buttons(page: Page) -> None:
    await page.wait_until(f"({BEAT}) === 'Beat: gate'")
    assert await page.evaluate(CHOICES) == ["Wave at Pip", "Sneak around the back"]
    assert await page.evaluate("!!document.querySelector('#story form input')")


async def test_clicking_a_choice_moves_the_story_and_rewind_goes_back(page: Page) -> None:
    await page.wait_until(f"({BEAT}) === 'Beat: gate'")
    await page.click("#story .choices button:first-child")
    await page.wait_until(f"({BEAT}) === 'Beat: porch'")
    assert await page.evaluate(CHOICES) == ["Offer to search the shed", "Say goodbye and leave"]
    history = await page.evaluate("[...document.querySelectorAll('#story ol li')].map(li => li.textContent)")
    assert [h.split(" ")[0] for h in history] == ["gate", "porch"]
    await page.click("#story ol li:first-child button")
    await page.wait_until(f"({BEAT}) === 'Beat: gate'")
    await page.screenshot(Path("/tmp/onstage-browser-story.png"))


async def test_typing_into_the_story_box_intervenes(page: Page) -> None:
    await page.wait_until(f"({BEAT}) === 'Beat: gate'")
    await page.evaluate(
        "(() => { const input = document.querySelector('#story form input'); input.value = 'sneak behind';"
        " input.form.requestSubmit(); })()"
    )
    await page.wait_until(f"({BEAT}) === 'Beat: shed'")
    # The history is a tree: after the rewind, the shed forks from the gate beside the porch.
    tree = await page.evaluate(
        "[...document.querySelectorAll('#story ol li')].map(li => [li.textContent.split(' ')[0], li.style.marginLeft])"
    )
    assert tree == [["gate", "0em"], ["porch", "1em"], ["shed", "1em"]]
