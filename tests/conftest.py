"""Fixtures every test package may use (the shipped models, loaded once per test run, or once per worker
under pytest-xdist), and how the tests are shared between xdist's workers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from events.hearing import Hearing
from server.sessions import SessionFactory
from streaming_model.tiny import TinyBackend

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler import Scheduling

WHOLE_PACKAGES = ("tests/server/cluster/",)
"""Packages whose tests share package-scoped fixtures (the Ray cluster): one xdist worker runs each whole."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """``--dist loadfile`` (as ``scripts/test`` runs): a module runs whole on one worker, so its
    module-scoped fixtures (a served session, a model's frames) are made once, and so does each of
    ``WHOLE_PACKAGES``. (xdist's own ``loadgroup`` marks do not reach the scheduler under pytest 9.)"""
    from xdist.scheduler import LoadFileScheduling

    class ByModuleOrPackage(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return next((p for p in WHOLE_PACKAGES if nodeid.startswith(p)), super()._split_scope(nodeid))

    return ByModuleOrPackage(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.fixture(scope="session")
def factory() -> SessionFactory:
    """Sessions with the default generator, voice, YAMNet and Whisper (no LLM endpoint)."""
    return SessionFactory(TinyBackend.load(), hearing=Hearing())
