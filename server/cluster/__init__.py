"""Generator workers on a Ray cluster (the ``ray`` extra): ``onstage serve --ray ADDRESS`` or ``--ray local``.

The generator moves, and the heavy encoders; the front end (transports, minds, media clock) stays where
it is. Each slot of
the cluster (a node's ``onstage_slot`` custom resource: a GPU, or a few CPU cores) runs one
``GeneratorSlot`` actor (``slot``) that loads the backend once and serves the sessions reserved on it,
each with its own state; Ray's scheduler places the actors on nodes by that resource. The front end's
``RaySlots`` (``remote``) is a ``streaming_model.pool.WorkerPool``: it reserves a slot before a session
starts (``NoFreeSlot`` when all are taken) and hands the conductor a ``RemoteWorker``. A slot's books
(``holdings``) say which front end holds each place (each renews a lease; a dead one's places lapse) and
let another front end claim a session with its resume token (its minds go with it: each chunk call
carries the front end's notes, ``agent.handover``). ``encoders`` are the actors (one per
``onstage_encoders`` resource, or one) that serve Whisper, YAMNet and Piper to every front end,
``remote_encoders`` the front end's side of them.
``settings`` configures it all without Ray installed; nothing here imports Ray unless ``--ray`` is given.
"""
