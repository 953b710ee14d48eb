"""The fast generator: a streaming latent video diffusion model, its runtime and its procedural world.

Import what you need from the submodules; light ones first:
- `streaming_model.manifest` (capabilities), `streaming_model.condition` (`ChunkCondition`) need no torch;
- `streaming_model.backend` (the backend protocol), `streaming_model.backends` (`open_backend`),
  `streaming_model.runtime` (`Generator`, `Session`), `streaming_model.worker` (`ModelWorker`),
  `streaming_model.render` (`render`) load the models.
"""
