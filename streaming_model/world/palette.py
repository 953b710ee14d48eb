"""Identity palettes and the scene's fixed colours (RGB, 0-255)."""

from __future__ import annotations

import numpy as np

SKY = np.array([196.0, 214.0, 232.0], np.float32)
FLOOR = np.array([150.0, 128.0, 104.0], np.float32)
SHADOW_DARKEN = 0.55
EYE_WHITE = np.array([250.0, 250.0, 250.0], np.float32)
PUPIL = np.array([20.0, 20.0, 30.0], np.float32)
BROW = np.array([40.0, 28.0, 24.0], np.float32)
MOUTH_LINE = np.array([50.0, 20.0, 20.0], np.float32)
MOUTH_OPEN = np.array([170.0, 30.0, 50.0], np.float32)
FACE = np.stack([EYE_WHITE, PUPIL, BROW, MOUTH_LINE, MOUTH_OPEN])

# body, belly, limbs (arms, paws, legs, ears): saturated and far from sky/floor so probes can segment.
PALETTES = np.array(
    [
        [[230, 120, 30], [250, 210, 150], [120, 60, 20]],  # orange fox
        [[60, 110, 220], [170, 200, 250], [20, 40, 110]],  # blue
        [[60, 170, 80], [190, 235, 170], [20, 80, 30]],  # green
        [[200, 60, 150], [245, 180, 220], [100, 20, 70]],  # magenta
        [[120, 80, 200], [210, 190, 245], [50, 30, 100]],  # violet
        [[210, 190, 40], [250, 240, 170], [110, 90, 10]],  # yellow
    ],
    np.float32,
)
NUM_IDENTITIES = len(PALETTES)

# The scene's objects: colours at least 70 (L1) from every palette colour, the sky, the floor and the face,
# so that the probes tell them from the character.
DOOR_LEAF = np.array([70.0, 95.0, 85.0], np.float32)
DOOR_FRAME = np.array([62.0, 62.0, 62.0], np.float32)  # also the lamp's post and head
DOORWAY = np.array([200.0, 170.0, 110.0], np.float32)  # the lit room behind an open door
BALL = np.array(
    [0.0, 110.0, 110.0], np.float32
)  # dark against the sky: a light cyan one was lost by the codec
LAMP_GLOW = np.array([255.0, 236.0, 150.0], np.float32)  # emissive: drawn after the light
RAIN = np.array([90.0, 110.0, 170.0], np.float32)
SNOW = np.array([255.0, 255.0, 255.0], np.float32)
SCENERY = (DOOR_LEAF, DOOR_FRAME, DOORWAY, BALL, LAMP_GLOW)

# Per-channel light on everything but the lamp's glow, by the scene's light (day, dusk, night); a lamp that
# is on lights the scene at least to LAMP_LIGHT.
LIGHT = np.array([[1.0, 1.0, 1.0], [0.92, 0.66, 0.55], [0.30, 0.34, 0.48]], np.float32)
LAMP_LIGHT = np.array([0.62, 0.54, 0.42], np.float32)
