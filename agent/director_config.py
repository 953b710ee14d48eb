"""The Director's configuration: a TOML file and the environment, and which mind a session gets.

Sources, later ones winning: the defaults here, the ``[director]`` table of a TOML file (path given, or
``ONSTAGE_CONFIG``), then the environment: ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (the openai
client's own variables) and ``ONSTAGE_LLM_MODEL``. See docs/director.md.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

Mode = Literal["auto", "llm", "script", "none"]
Mind = Literal["llm", "script", "none"]

DEFAULT_PERSONA = (
    "You are the mind of a small animated character on a live video call. You see the user's words, "
    "gestures and the sounds around you, and you act only through your tools: say short, natural sentences "
    "(one or two at a time), and move, look and show emotions to go with them. Keep the character alive and "
    "responsive; never describe your actions in words, perform them."
)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the setting."""


class DirectorConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything the Director needs to know; every field can be set in the ``[director]`` TOML table.

    barge_in: when the user speaks while the Director thinks, ``cancel`` stops the run; ``stale`` lets it
    finish but its plans die at dispatch (their epoch is old).
    """

    mode: Mode = "auto"
    base_url: str | None = None
    api_key: str | None = None
    model: str = "gpt-4o-mini"
    timeout_s: float = 20.0
    stream: bool = True
    temperature: float | None = 0.7
    max_tokens: int | None = 400
    max_steps: int = 4
    """LLM calls per run: each may call tools, whose results go back to the LLM in the next call."""
    barge_in: Literal["cancel", "stale"] = "cancel"
    debounce_s: float = 0.25
    """Triggers arriving within this long of each other make one run."""
    turn_debounce_s: float = 0.0
    """The same for the end of a spoken turn: the turn detector has already waited for the silence that
    ends it, and every millisecond here is added to the time the user waits for an answer."""
    retries: int = 2
    backoff_s: float = 1.0
    backoff_max_s: float = 15.0
    idle_after_s: float | None = None
    """Start a run after this much quiet from the user (None: never)."""
    history_messages: int = 40
    persona: str = DEFAULT_PERSONA
    text_as_speech: bool = True
    """Plain text in an answer (no tool call) is spoken, as small models often answer that way."""
    speak_while_streaming: bool = True
    """A streamed reply's first ``say`` starts speaking its first sentence while the rest streams, and
    extends that speech once the reply is whole (``agent.streamed_speech``)."""
    salient_sounds: tuple[str, ...] = (
        "Knock",
        "Clapping",
        "Finger snapping",
        "Laughter",
        "Doorbell",
        "Whistling",
    )
    salient_gestures: tuple[str, ...] = ("wave", "point", "thumbs_up", "raise_hand")

    def endpoint_configured(self) -> bool:
        """Whether an LLM endpoint is known: a base URL, or an API key for the default OpenAI endpoint."""
        return bool(self.base_url or self.api_key)


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> DirectorConfig:
    """Read the ``[director]`` table of ``path`` (or of ``$ONSTAGE_CONFIG``), then apply the environment."""
    env = os.environ if env is None else env
    if path is None and env.get("ONSTAGE_CONFIG"):
        path = Path(env["ONSTAGE_CONFIG"])
    table: dict[str, object] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        section = data.get("director", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [director] must be a table")
        table.update(section)
    for variable, key in (
        ("OPENAI_BASE_URL", "base_url"),
        ("OPENAI_API_KEY", "api_key"),
        ("ONSTAGE_LLM_MODEL", "model"),
    ):
        if env.get(variable):
            table[key] = env[variable]
    try:
        config = msgspec.convert(table, DirectorConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"director config: {exc}") from None
    if config.max_steps < 1 or config.timeout_s <= 0 or config.retries < 0:
        raise ConfigError("director config: max_steps >= 1, timeout_s > 0 and retries >= 0 are required")
    return config


def choose_mind(requested: Mode, config: DirectorConfig) -> Mind:
    """The mind a session runs: ``auto`` is the LLM when an endpoint is configured, the script otherwise."""
    if requested == "auto":
        return "llm" if config.endpoint_configured() else "script"
    if requested == "llm" and not config.endpoint_configured():
        raise ConfigError("director 'llm' needs an endpoint: set OPENAI_BASE_URL (or OPENAI_API_KEY)")
    return requested
