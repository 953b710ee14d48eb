"""Test helpers: a real local chat-completions server."""
