"""Story control through the protocol: choose, intervene, rewind; the picture continues exactly."""

from __future__ import annotations

import pytest

from server.client import SessionClient

pytestmark = pytest.mark.asyncio(loop_scope="module")


def states(client: SessionClient) -> list[dict]:
    return client.received.of_type("story.state")


async def test_a_playthrough_choose_intervene_rewind_and_choose_differently(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(story="garden_gate", seed=11, director="script")
        first = await client.wait_type("story.state", node="gate")
        assert {c["id"] for c in first["choices"]} == {"wave", "sneak"}
        start_checkpoint = first["checkpoint"]

        await client.send({"type": "story.choose", "choice": "wave", "ref": "c1"})
        assert (await client.wait_type("input.accepted", ref="c1"))["kind"] == "story"
        porch = await client.wait_type("story.state", node="porch")
        assert [n["beat"] for n in porch["history"]][:2] == ["gate", "porch"]
        assert porch["variables"] == {"trust": 1, "has_key": False}

        await client.send(
            {"type": "story.intervene", "text": "I will help you search for the key", "ref": "i1"}
        )
        await client.wait_type("story.state", node="shed")

        await client.send({"type": "story.rewind", "checkpoint": start_checkpoint, "ref": "r1"})
        back = await client.wait_for(
            lambda m: m.get("type") == "story.state" and m["node"] == "gate" and len(states(client)) > 3
        )
        assert back["checkpoint"] == start_checkpoint
        assert back["variables"] == {"trust": 0, "has_key": False}  # the rewind took the variables back too

        await client.send({"type": "story.choose", "choice": "sneak", "ref": "c2"})
        shed = await client.wait_for(
            lambda m: m.get("type") == "story.state" and m["node"] == "shed" and len(states(client)) > 4
        )
        beats = [n["beat"] for n in shed["history"]]
        assert (
            beats.count("gate") >= 1 and "porch" in beats and beats.count("shed") == 2
        )  # both timelines kept


async def test_after_a_rewind_the_first_chunk_repeats_the_one_first_generated_there(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(story="garden_gate", seed=5, director="script")
        first = await client.wait_type("story.state", node="gate")
        await client.wait_frame(lambda f: f.header["chunk"] >= 4)
        await client.send({"type": "story.rewind", "checkpoint": first["checkpoint"]})
        # The generator goes back to its first chunk while the media clock goes on.
        again = await client.wait_frame(lambda f: f.header["chunk"] > 0 and f.header["gen_chunk"] == 0, 15)
        original = [f for f in client.received.video if f.header["chunk"] == 0]
        await client.wait_frame(lambda f: f.header["chunk"] > again.header["chunk"])
        repeat = [f for f in client.received.video if f.header["chunk"] == again.header["chunk"]]
        assert [f.jpeg for f in repeat] == [f.jpeg for f in original]
        assert again.header["pts_ms"] > original[-1].header["pts_ms"]


async def test_bad_story_requests_get_clear_errors(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(story="garden_gate", director="script")
        await client.wait_type("story.state")
        await client.send({"type": "story.choose", "choice": "fly", "ref": "a"})
        assert "fly" in (await client.wait_type("error", ref="a"))["message"]
        await client.send({"type": "story.rewind", "checkpoint": "nope", "ref": "b"})
        assert (await client.wait_type("error", ref="b"))["code"] == "bad_field"
        await client.send({"type": "story.intervene", "text": "dance the tango", "ref": "c"})
        error = await client.wait_type("error", ref="c")
        assert "wave" in error["message"] and not error["fatal"]
    async with SessionClient(url) as client:
        await client.send({"type": "session.start", "story": "../etc/passwd", "ref": "s"})
        assert (await client.wait_type("error", ref="s"))["code"] == "bad_field"
    async with SessionClient(url) as client:
        await client.start()
        await client.send({"type": "story.choose", "choice": "wave", "ref": "n"})
        assert "no story" in (await client.wait_type("error", ref="n"))["message"]


async def test_a_restarted_server_brings_a_story_session_back_where_it_was(factory, tmp_path) -> None:
    from server.app import OnstageServer
    from server.limits import Limits
    from server.sessions import SessionFactory

    db = str(tmp_path / "stories.sqlite")

    async def serve() -> OnstageServer:
        server = OnstageServer(
            SessionFactory(factory.backend, factory.voice, factory.hearing, story_db=db),
            Limits(admission="ceiling"),
        )
        await server.start("127.0.0.1", 0)
        return server

    first = await serve()
    try:
        async with SessionClient(f"ws://127.0.0.1:{first.port}/v1/session") as client:
            started = await client.start(story="garden_gate", director="script", seed=4)
            await client.wait_type("story.state", node="gate")
            await client.send({"type": "story.choose", "choice": "wave"})
            await client.wait_type("story.state", node="porch")
            await client.wait_frame(lambda f: f.header["chunk"] >= 6)  # past a chunk boundary: checkpointed
    finally:
        await first.close()
    second = await serve()
    try:
        url = f"ws://127.0.0.1:{second.port}/v1/session"
        async with SessionClient(url) as client:
            wrong = {"session_id": started["session_id"], "resume_token": "guess"}
            await client.send({"type": "session.start", "resume": wrong, "ref": "w"})
            assert (await client.wait_type("error", ref="w"))["code"] == "resume_failed"
        async with SessionClient(url) as client:
            resume = {"session_id": started["session_id"], "resume_token": started["resume_token"]}
            back = await client.start(resume=resume)
            assert back["session_id"] == started["session_id"]
            state = await client.wait_type("story.state")
            assert (state["node"], state["variables"]["trust"]) == ("porch", 1)
            assert [n["beat"] for n in state["history"]] == ["gate", "porch"]
            await client.wait_frame(lambda f: f.header["chunk"] >= 2)
            await client.send({"type": "story.choose", "choice": "ask"})
            await client.wait_type("story.state", node="shed")
    finally:
        await second.close()


async def test_speech_cut_by_a_rewind_is_told_interrupted(url: str) -> None:
    async with SessionClient(url) as client:
        await client.start(story="garden_gate", seed=6, director="script")
        gate = await client.wait_type("story.state", node="gate")
        await client.send({"type": "story.choose", "choice": "wave"})
        lost = "I lost the key. Somewhere near the shed, I think."
        await client.wait_type("character.speech", 30, text=lost, state="started")
        await client.send({"type": "story.rewind", "checkpoint": gate["checkpoint"], "ref": "r"})
        cut = await client.wait_type("character.speech", 30, text=lost, state="interrupted")
        assert lost.startswith(cut["heard_text"])  # what had been played when the rewind cut it
        spoken = [(m["text"], m["state"]) for m in client.received.of_type("character.speech")]
        assert (lost, "ended") not in spoken
