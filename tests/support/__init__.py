"""Test helpers: a real local chat-completions server, and events narrowed to their kind."""
