"""``onstage eval``: is a configuration of the model within the noise floor of another?

Both configurations run the same scripted evaluation (``streaming_model.evaluate``: every action held,
side turns, mouth against the voice, identity, motion at the end) and a long-session drift probe over the
same seeds; per probe metric, the difference of their means is judged against the spread between seeds.

- ``options``: the runtime options a configuration is made of (``steps=1 cache=naive ...``) and the
  length of the script.
- ``drift``: the long-session probe (identity distance and motion amplitude per window).
- ``runner``: one configuration over its seeds, in a pool of worker processes, with progress.
- ``verdict``: the rule that calls a difference within the noise floor or not.
- ``report`` and ``plots``: DIR/results.json, DIR/report.md and its PNG plots.
- ``compare``: the whole run, as ``onstage eval`` calls it.
"""
