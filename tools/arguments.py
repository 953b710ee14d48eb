"""What the character tools' arguments are made of: shared argument types, the manifest's vocabulary as
enums (``Vocabulary``), and the argument Struct of a tool (``args_struct``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from agent.plans import Composition
from streaming_model.manifest import Manifest

Unit = Annotated[float, msgspec.Meta(ge=-1.0, le=1.0)]
Seconds = Annotated[float, msgspec.Meta(gt=0.0, le=60.0, description="How long, in seconds.")]
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=600)]
CompositionArg = Annotated[
    Composition,
    msgspec.Meta(
        description="merge: start now beside what runs; append: after your earlier plans on the same "
        "channels; replace: stop your earlier plans first."
    ),
]


def literal(values: tuple[str, ...]) -> Any:
    """An enum of ``values`` as an argument type."""
    return Literal[values]


class Vocabulary(msgspec.Struct, frozen=True):
    """What several tools' arguments are drawn from: the manifest, its action names and their enum
    (``actions``), its emotions' enum, and the scene's places (an enum, or any string if it names none)."""

    manifest: Manifest
    names: tuple[str, ...]
    actions: Any
    emotions: Any
    place: Any

    @classmethod
    def of(cls, manifest: Manifest, places: tuple[str, ...]) -> Vocabulary:
        """The vocabulary of ``manifest`` with the scene's named spots ``places`` (may be empty)."""
        names = tuple(a.name for a in manifest.actions)
        place: Any = literal(places) if places else str
        return cls(manifest, names, literal(names), literal(manifest.emotions), place)


def args_struct(name: str, fields: list[tuple[Any, ...]], doc: str) -> type[msgspec.Struct]:
    """The argument Struct of tool ``name``: ``fields`` as for ``msgspec.defstruct``, ``doc`` its
    docstring (both end up in the JSON Schema the LLM sees); unknown fields are refused."""
    struct = msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)
    struct.__doc__ = doc
    return struct
