"""Training scripts for the codec and the diffusion transformer (CPU, resumable, background-friendly)."""
