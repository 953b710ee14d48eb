"""What noting a session's minds costs on the event loop, per chunk, where another front end could take
the session over (``agent/handover.py``; with ``onstage serve --ray`` the conductor notes them before every
chunk call, on the loop every session shares).

    .venv/bin/python benchmarks/handover.py [--chunks 600] [--turns 20]

Two sessions' minds, without the server:

- scripted: the default plan (``greeter``) with reflexes; a wave every 2 s of chunk time, so reflex blocks
  come and go; ``--chunks`` chunks ticked, the minds noted after each decision;
- director: the LLM mind against a real local chat-completions server (``tests/support/llm_server.py``), after
  ``--turns`` turns of conversation (each a say and a perform, so the memory grows as in a real session); then
  ``--chunks`` chunks ticked and noted, a new turn every 60 chunks (the Director's memory is noted again after
  each run).

Per session: the median, p99 and largest time of one ``Handover.notes`` call, as a share of the chunk's
period too, and the size of the notes (the per-chunk ``minds`` note, and the ``director`` note when it is
sent). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.support

from agent.director_config import DirectorConfig
from agent.handover import DIRECTOR, MINDS, Handover
from agent.minds import Minds
from agent.reflex import ReflexConfig
from agent.script import load_script
from events.bus import EventBus
from events.stamp import Stamper
from events.vocabulary import Gesture, TextInput
from streaming_model.manifest import build_manifest
from tests.support.llm_server import Call, LLMServer, Reply
from tools.character import build_toolbox

MANIFEST = build_manifest()


class Tally:
    """Times and sizes of the notes taken."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.minds: list[int] = []
        self.director: list[int] = []

    async def note(self, handover: Handover) -> None:
        began = time.perf_counter()
        notes = await handover.notes()
        self.times.append(time.perf_counter() - began)
        self.minds.append(len(notes[MINDS]))
        if DIRECTOR in notes:
            self.director.append(len(notes[DIRECTOR]))

    def row(self, name: str) -> str:
        ms = np.array(self.times) * 1000.0
        p50, p99, top = np.percentile(ms, 50), np.percentile(ms, 99), ms.max()
        share = 100.0 * p50 / (MANIFEST.chunk_s * 1000.0)
        director = (
            f"{np.median(self.director) / 1024:.1f} KiB x{len(self.director)}" if self.director else "-"
        )
        return (
            f"| {name} | {len(ms)} | {p50:.3f} | {p99:.3f} | {top:.3f} | {share:.2f} % |"
            f" {np.median(self.minds) / 1024:.1f} KiB | {director} |"
        )


async def scripted(chunks: int) -> Tally:
    bus = EventBus()
    config = DirectorConfig()
    minds = Minds.build(
        bus=bus,
        session="s",
        mind="script",
        manifest=MANIFEST,
        config=config,
        script=load_script("greeter", MANIFEST),
        reflexes=ReflexConfig(),
    )
    minds.start()
    stamp, handover, tally = Stamper("s"), Handover(minds), Tally()
    every = round(2.0 / MANIFEST.chunk_s)
    for k in range(chunks):
        if k % every == every - 1:
            await bus.publish(stamp(Gesture, gesture="wave"))
            await asyncio.sleep(0)
        minds.tick(k)
        await tally.note(handover)
    await minds.stop()
    return tally


def reply(request: dict) -> Reply:
    if request["messages"][-1]["role"] == "tool":
        return Reply(text="")
    return Reply(
        tool_calls=[
            Call("say", {"text": "Of course. Here is a longer answer, as a character would give it to you."}),
            Call("perform", {"action": "nod"}),
        ]
    )


async def directed(chunks: int, turns: int) -> Tally:
    async with LLMServer(default=reply) as llm:
        bus = EventBus()
        config = DirectorConfig(base_url=llm.base_url, debounce_s=0.01)
        minds = Minds.build(
            bus=bus,
            session="s",
            mind="llm",
            manifest=MANIFEST,
            config=config,
            tools=build_toolbox(MANIFEST, ()),
        )
        assert minds.director is not None
        minds.start()
        stamp, handover, tally = Stamper("s"), Handover(minds), Tally()
        k = 0
        for turn in range(turns):
            await bus.publish(stamp(TextInput, text=f"Tell me something about number {turn}."))
            async with asyncio.timeout(30):
                await minds.director.settle()
            for _ in range(12):  # the reply plays on: its blocks run out before the next turn
                minds.tick(k)
                k += 1
        for i in range(chunks):
            if i % 60 == 59:
                await bus.publish(stamp(TextInput, text="And then?"))
                async with asyncio.timeout(30):
                    await minds.director.settle()
            minds.tick(k)
            k += 1
            await tally.note(handover)
        await minds.stop()
        return tally


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=600)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    period = MANIFEST.chunk_s * 1000.0
    print(f"chunk period {period:.1f} ms; one Handover.notes call per chunk\n")
    print("| session | notes | p50 ms | p99 ms | max ms | p50 of the period | minds note | director note |")
    print("|---|---|---|---|---|---|---|---|")
    print((await scripted(args.chunks)).row("scripted (greeter, a wave every 2 s)"), flush=True)
    print((await directed(args.chunks, args.turns)).row(f"director ({args.turns} turns before)"))


if __name__ == "__main__":
    asyncio.run(main())
