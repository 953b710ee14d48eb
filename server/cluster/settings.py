"""Configuration of generator workers on Ray (readable without Ray installed)."""

from __future__ import annotations

import msgspec

SLOT_RESOURCE = "onstage_slot"
"""The custom resource a Ray node declares once per generator slot it offers (``ray start --resources
'{"onstage_slot": 2}'``); each slot actor needs one."""

ENCODERS_RESOURCE = "onstage_encoders"
"""The custom resource a Ray node declares once per shared encoders actor it offers (``ray start
--resources '{"onstage_encoders": 1}'``); a cluster that declares none gets one, placed by Ray."""


class ClusterSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the generator workers run: in this process (no ``address``) or on a Ray cluster."""

    address: str | None = None
    """``local``: start Ray on this machine with ``local_slots`` slots; a Ray address (``ray://host:10001``,
    ``host:6379`` or ``auto``): join that cluster and use every slot its nodes declare. None: no Ray."""
    local_slots: int = 2
    """Slots of the Ray started by ``address = "local"``."""
    sessions_per_slot: int = 1
    """Sessions one slot actor serves at once, each with its own state; their chunks that fall due together
    are made as one batch where the backend batches (up to 8), else they take turns."""
    threads: int = 1
    """torch threads of each slot actor."""
    snapshot_every: int = 4
    """Each session's state is saved every this many chunks (exported off the generating thread and kept
    by the front end): a session whose worker dies goes on elsewhere from there, regenerating at most this
    many chunks."""
    shared_encoders: bool = True
    """Whisper, YAMNet and Piper in the cluster's encoders actors (``server.cluster.encoders``: one per
    ``onstage_encoders`` resource, or one) that every front end shares, rather than loaded by each."""
    lease_s: float = 10.0
    """A front end holds its slots' places only while it renews its lease (a few times a lease): the
    places of one that stopped (killed, its machine lost) are free again within this many seconds."""
    start_timeout_s: float = 180.0
    """How long the slot actors may take to be placed and to load the backend before serving gives up."""

    def check(self) -> None:
        """``ValueError`` naming the first setting out of range."""
        for name in ("local_slots", "sessions_per_slot", "threads", "snapshot_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"ray setting {name} must be at least 1, got {getattr(self, name)}")
        if not self.lease_s > 0:
            raise ValueError(f"ray setting lease_s must be above 0, got {self.lease_s}")
