"""W1-style branching stories: a story format, its validation, the engine, checkpoints and rewind.

- ``format``: the story file's types (TOML) and loading; ``StoryError`` lists problems with their paths.
- ``expr``: the tiny condition and effect language (parsed, type checked, never ``eval``-ed).
- ``graph``: validation and the immutable compiled graph, plus a session's branches.
- ``state`` and ``engine``: the small serialisable state, the history tree, and the rules as pure functions.
- ``store``: checkpoints and sessions in SQLite.
- ``player``: a story played in a live session (realizer, Director, generator state, rewind).

See docs/story.md.
"""
