"""onstage inside other voice-agent frameworks: a Pipecat video service (``integrations.pipecat``, extra
``onstage[pipecat]``) and a LiveKit Agents avatar video generator (``integrations.livekit``, extra
``onstage[livekit]``), over one protocol client (``integrations.session``). Nothing in ``server`` imports
this package; it is a client of the session protocol (docs/integrations.md)."""
