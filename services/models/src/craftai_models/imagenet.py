"""ImageNet normalisation, as every network here was trained with it: (x / 255 - MEAN) / STD per channel."""

from __future__ import annotations

MEAN = (0.485, 0.456, 0.406)  # R, G, B
STD = (0.229, 0.224, 0.225)
