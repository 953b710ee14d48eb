"""The session core: one live session on its media clock, free of any wire format.

A transport (the WebSocket server's protocol adapter, ``server.adapter``; WebRTC and framework services
later) feeds it inputs and receives typed outputs (``outputs``). Its parts, one job each:
``schedule`` (the clock, deadlines, whether a redirect or a replacement still fits), ``decider`` (minds
and voice into the next chunk's condition, transactionally), ``chunk_maker`` (the chunk's life: generate,
redirect, replace), ``urgent`` (the inputs that may redirect or replace a chunk), ``story_moves`` (story
moves between chunks), ``media_out`` (frames and audio paced at their presentation times) and
``conductor`` (the generation loop on the chunk clock; the session's inputs and lifecycle).
"""
