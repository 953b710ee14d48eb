"""The procedural training world: a 2D character whose state advances deterministically per frame."""
