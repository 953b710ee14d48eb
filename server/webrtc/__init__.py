"""The WebRTC transport (the ``webrtc`` extra, aiortc): one peer connection per client, beside the WebSocket.

Signalling is one HTTP request on the server's own port (``endpoint``): the client's SDP offer in, the
server's answer out, with the WebSocket's authentication. The peer connection then carries the
character's video and voice as tracks (``tracks``), the client's microphone as a track (``mic``), and the
protocol's JSON messages on a data channel (``peer``), through the same ``ProtocolAdapter`` and the same
server loop as a WebSocket client: every rule of docs/protocol.md holds unchanged. ``settings`` (no
aiortc needed) configures it; nothing here is imported unless aiortc is installed.
"""
