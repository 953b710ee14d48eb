"""Building sessions: the parts every session shares (models, loaded once) and the parts each owns.

Shared: the backend (the model, loaded and warmed up once) or a pool of generator slots elsewhere
(``streaming_model.pool``), the voice, YAMNet, Whisper and the Director's settings. Per session: its event
bus and ids, its ears, its minds (realizer with reflexes, script or Director), its backend session behind
a model worker (reserved from the pool before the session starts: ``NoFreeSlot`` when none is free) and
its speech player, all wired into one ``Conductor``. A session's clock, picture and vocabulary are its
backend's (``workers.manifest``).

Where the pool's workers live outside this process (generator slots on a Ray cluster), a session is opened
with a note of its ``session.start`` and a hash of its resume token beside its generator, so that another
front end can take it over (``revive``): the generator goes on exactly where it was, the minds start
afresh from the note. A story session keeps no such note: its story lives in this server's story store.
"""

from __future__ import annotations

import asyncio
import logging

import msgspec
import openai

from agent.director_config import ConfigError, DirectorConfig, Mind, choose_mind, load_config
from agent.handover import HandoverError, Resumed, adopt_story, take_over
from agent.llm import chat_client
from agent.minds import Minds
from agent.reflex import ReflexConfig
from agent.script import Script, ScriptError, load_script, script_from_builtins
from agent.story.format import StoryError, StorySpec, load_story
from agent.story.player import StoryPlayer
from agent.story.store import CheckpointStore
from events.bus import EventBus
from events.ears import Ears, EarsConfig, EarsService
from events.gestures import KNOWN_GESTURES
from events.hearing import Hearing
from events.sound_classes import DEFAULT_THRESHOLDS
from events.stamp import Stamper
from events.turn import TurnConfig
from server import protocol as p
from server.client_voice import CharacterVoice
from server.core.conductor import Conductor, ConductorConfig
from server.core.schedule import Clock
from server.revival import SessionRecords
from server.speech import SpeechConfig
from server.voice import Voice
from streaming_model.backend import Backend
from streaming_model.kv_cache import SnapshotError
from streaming_model.pool import Claimed, LocalWorkers, Resumable, WorkerPool
from streaming_model.worker import GeneratorWorker
from streaming_model.world.palette import NUM_IDENTITIES
from tools.character import build_toolbox
from tools.registry import ToolBox
from tools.story import register_story_tools

log = logging.getLogger(__name__)

CHARACTERS: tuple[str, ...] = ("fox", "blue", "green", "magenta", "violet", "yellow")[:NUM_IDENTITIES]
DEFAULT_PLAN = "greeter"


class SessionDefaults(msgspec.Struct, frozen=True, kw_only=True):
    """What a session gets when its ``session.start`` does not say."""

    character: str = "fox"
    plan: str = DEFAULT_PLAN
    director: str = "auto"


def server_turn(punctuated_silence_ms: float = TurnConfig().punctuated_silence_ms) -> TurnConfig:
    """When a session's turns end: with a transcriber running, a turn waits a little for its last words."""
    return TurnConfig(transcript_wait_ms=800.0, punctuated_silence_ms=punctuated_silence_ms)


class SessionFactory:
    """Makes conductors for ``session.start`` messages; holds the models all sessions share."""

    def __init__(
        self,
        backend: Backend | None,
        voice: Voice | None = None,
        hearing: Hearing | None = None,
        director: DirectorConfig | None = None,
        defaults: SessionDefaults | None = None,
        conductor: ConductorConfig | None = None,
        ears: EarsConfig | None = None,
        story_db: str = ":memory:",
        clock: Clock | None = None,
        workers: WorkerPool | None = None,
        speech: SpeechConfig | None = None,
    ) -> None:
        """Sessions' workers come from ``workers``, else from ``backend`` in this process; ``speech`` says
        how the server's voice starts (``server.speech.SpeechConfig``)."""
        if workers is None:
            if backend is None:
                raise ValueError("a session factory needs a backend or a worker pool")
            workers = LocalWorkers(backend)
        self.backend = backend
        self.workers = workers
        self.voice = voice or Voice()
        self.hearing = hearing or Hearing()
        self.director = director if director is not None else load_config()
        self.defaults = defaults or SessionDefaults()
        # Sessions whose chunks a lane (in process or in a slot) batches start on a shared grid, so that
        # their chunks fall due together.
        self.conductor = conductor or ConductorConfig(aligned=workers.batching)
        self.ears = ears or EarsConfig(turn=server_turn())
        self.manifest = workers.manifest.vocabulary
        self.story_db = story_db
        self.speech = speech or SpeechConfig()
        self.clock = clock
        """The clock sessions run on (None: the event loop's); tests run sessions in virtual time."""
        self._store: CheckpointStore | None = None
        self._session_records: SessionRecords | None = None
        self._chat: tuple[asyncio.AbstractEventLoop, openai.AsyncOpenAI] | None = None
        # Loaded up front: a model loading mid-session would stall that session's first reply.
        self.voice.load()
        self.hearing.load()

    def started_message(self, session_id: str) -> p.SessionStarted:
        """``session.started`` for a session (the resume token is filled in by the server)."""
        return p.SessionStarted(
            session_id=session_id,
            resume_token="",
            protocol=p.PROTOCOL_VERSION,
            width=self.manifest.width,
            height=self.manifest.height,
            fps=self.manifest.fps,
            chunk_frames=self.manifest.frames_per_chunk,
            audio_in_rate=p.AUDIO_IN_RATE,
            audio_out_rate=self.voice.rate,
            capabilities=p.Capabilities(
                actions=[a.name for a in self.manifest.actions],
                emotions=list(self.manifest.emotions),
                gestures=sorted(KNOWN_GESTURES),
                sounds=sorted(DEFAULT_THRESHOLDS),
                scene={spec.name: list(spec.choices) for spec in self.manifest.scene},
            ),
        )

    async def create(
        self, session_id: str, start: p.SessionStart, resume_token: str
    ) -> tuple[Conductor, p.SessionStarted]:
        """A conductor for ``start`` (not started yet); ``ValueError`` names a bad field."""
        story, script = await asyncio.to_thread(self._load, start)
        note = Resumable.of(msgspec.json.encode(start), resume_token)
        conductor, tools = await self._build(session_id, start, script, note)
        if story is not None:
            store = await self._story_store()
            minds = conductor.minds
            try:
                conductor.story = await StoryPlayer.begin(
                    story,
                    minds.realizer,
                    session=session_id,
                    store=store,
                    director=minds.director,
                    bus=conductor.bus,
                    seed=conductor.worker.seed,
                )
            except StoryError as exc:
                await conductor.close()  # frees its worker (a cluster slot, with Ray)
                raise ValueError(str(exc)) from None
            if minds.director is not None:
                register_story_tools(tools, conductor.story)
            await asyncio.to_thread(self._records().save, session_id, resume_token, start)
        return conductor, self.started_message(session_id)

    async def revive(self, session_id: str, resume_token: str) -> Conductor | None:
        """A session not held by this server: one another front end opened whose generator the pool can
        claim (``take_over``), or else a story session of an earlier server, rebuilt from the story store
        at its last checkpoint (story, Director memory, realizer and generator state); None if unknown or
        the token is wrong. ``ValueError`` says why a known session cannot come back (its checkpoint is
        unreadable, say)."""
        taken = await self.take_over(session_id, resume_token)
        if taken is not None:
            return taken
        start = await asyncio.to_thread(self._records().load, session_id, resume_token)
        if start is None:
            return None
        _, script = await asyncio.to_thread(self._load, start)
        conductor, tools = await self._build(session_id, start, script, None)
        minds = conductor.minds
        try:
            player, restored = await StoryPlayer.resume(
                await self._story_store(),
                minds.realizer,
                session=session_id,
                director=minds.director,
                bus=conductor.bus,
            )
            conductor.story = player
            await conductor.continue_from(restored.chunk + 1, restored.generator)
        except (StoryError, SnapshotError) as exc:
            await conductor.close()
            raise ValueError(f"the saved story session cannot be continued: {exc}") from None
        if minds.director is not None:
            register_story_tools(tools, player)
        return conductor

    async def take_over(self, session_id: str, resume_token: str) -> Conductor | None:
        """Session ``session_id`` of another front end (alive or not), if the pool holds its generator and
        ``resume_token`` is its token: its minds as that front end noted them with the last chunk made
        (``agent.handover``), around its generator, which goes on from there (the front end that had it is
        refused from then on); a story session's story too, into this front end's story store. Minds that
        were never noted, or cannot be read, start afresh from the session's start note (logged); a story
        session then cannot come back (``ValueError``). None if the pool knows no such session."""
        claimed = await self.workers.claim(session_id, resume_token)
        if claimed is None:
            return None
        try:
            start = msgspec.json.decode(claimed.note, type=p.SessionStart)
            _, script = await asyncio.to_thread(self._load, start)
            conductor, tools = self._wire(session_id, script, self._mind(start), claimed.worker)
            resumed = await self._take_minds(conductor, claimed, story=start.story is not None)
            if start.story is not None and resumed is not None:
                conductor.story = await self._take_story(conductor, claimed, resumed, tools)
                await asyncio.to_thread(self._records().save, session_id, resume_token, start)
        except BaseException:
            await claimed.worker.close()
            raise
        await conductor.continue_from(claimed.next_chunk, None, resumed)
        return conductor

    async def _take_minds(self, conductor: Conductor, claimed: Claimed, *, story: bool) -> Resumed | None:
        try:
            return await take_over(conductor.minds, claimed.notes, claimed.next_chunk)
        except HandoverError as exc:
            if story:
                raise ValueError(f"the story session cannot be taken over: {exc}") from None
            log.warning("session %s: its minds start afresh on this front end: %s", conductor.session_id, exc)
            return None

    async def _take_story(
        self, conductor: Conductor, claimed: Claimed, resumed: Resumed, tools: ToolBox
    ) -> StoryPlayer:
        """The story of a session taken over, going on where the other front end played it."""
        minds = conductor.minds
        try:
            player = await adopt_story(
                await self._story_store(), claimed.notes, resumed, session=conductor.session_id, minds=minds
            )
        except (HandoverError, StoryError) as exc:
            raise ValueError(f"the story session cannot be taken over: {exc}") from None
        if minds.director is not None:
            register_story_tools(tools, player)
        return player

    async def _story_store(self) -> CheckpointStore:
        if self._store is None:
            self._store = await CheckpointStore.open(self.story_db)
        return self._store

    def _records(self) -> SessionRecords:
        if self._session_records is None:
            self._session_records = SessionRecords(self.story_db)
        return self._session_records

    def _load(self, start: p.SessionStart) -> tuple[StorySpec | None, Script | None]:
        """The story and the plan ``start`` names, read and validated (file reads and plan checks: call it
        in a thread, off the event loop every session shares); ``ValueError`` names a bad field."""
        try:
            # A story's beats are its script: each beat runs its own plan.
            story = load_story(start.story) if start.story is not None else None
            plan = (
                start.plan if start.plan is not None else (None if story is not None else self.defaults.plan)
            )
            script = (
                None
                if plan is None
                else load_script(plan, self.manifest)
                if isinstance(plan, str)
                else script_from_builtins(plan, self.manifest)
            )
        except (ScriptError, StoryError) as exc:
            raise ValueError(str(exc)) from None
        except OSError:
            # The client named something that exists; what the system said about it is the server's own.
            raise ValueError("the plan or story named could not be read") from None
        return story, script

    def _mind(self, start: p.SessionStart) -> Mind:
        """The mind ``start`` asks for; ``ValueError`` if this server cannot give it."""
        try:
            return choose_mind(start.director, self.director)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    async def _build(
        self, session_id: str, start: p.SessionStart, script: Script | None, note: Resumable | None
    ) -> tuple[Conductor, ToolBox]:
        """The session's parts around a worker from the pool (``NoFreeSlot`` if there is none), opened
        with ``note`` for other front ends."""
        character = start.character or self.defaults.character
        if character not in CHARACTERS:
            raise ValueError(f"character: unknown {character!r}; known: {', '.join(CHARACTERS)}")
        mind = self._mind(start)
        seed = start.seed if start.seed is not None else int.from_bytes(session_id.encode()[:4], "big")
        worker = await self.workers.open(
            identity=CHARACTERS.index(character), seed=seed, name=session_id, resumable=note
        )
        try:
            return self._wire(session_id, script, mind, worker)
        except BaseException:
            await worker.close()  # a slot reserved for a session that never came is freed at once
            raise

    def _chat_client(self) -> openai.AsyncOpenAI:
        """The chat-completions client every session's Director on this event loop shares
        (``agent.llm.chat_client``): its connections belong to the loop they were opened on."""
        loop = asyncio.get_running_loop()
        if self._chat is None or self._chat[0] is not loop:
            self._chat = (loop, chat_client(self.director))
        return self._chat[1]

    async def close(self) -> None:
        """Close what the sessions shared (the Directors' HTTP client); the workers close on their own."""
        if self._chat is not None:
            await self._chat[1].close()
            self._chat = None

    def _wire(
        self, session_id: str, script: Script | None, mind: Mind, worker: GeneratorWorker
    ) -> tuple[Conductor, ToolBox]:
        stamper = Stamper(session_id)
        bus = EventBus()
        tools = build_toolbox(self.manifest, tuple(script.places) if script is not None else ())
        minds = Minds.build(
            bus=bus,
            session=session_id,
            mind=mind,
            manifest=self.manifest,
            config=self.director,
            script=script,
            tools=tools,
            reflexes=ReflexConfig(),
            fallbacks=self.workers.manifest.fallbacks,
            voice="server",
            client=self._chat_client() if mind == "llm" else None,
        )
        ears = EarsService(Ears(stamper, self.ears, self.hearing.listeners(stamper)), bus)
        conductor = Conductor(
            session_id=session_id,
            worker=worker,
            minds=minds,
            bus=bus,
            ears=ears,
            player=CharacterVoice(self.voice, minds.realizer, bus.tracer, self.speech),
            stamper=stamper,
            config=self.conductor,
            clock=self.clock,
        )
        return conductor, tools
