"""Draw the sample images attndesk ships (attndesk/resources/images/*.png): simple, deterministic
pictures with clear shapes, where an attention map has something to find.

    python scripts/make_sample_images.py        # rewrites the PNGs
"""

from __future__ import annotations

import math
from pathlib import Path

from PIL import Image, ImageDraw

SIZE = 96
OUT = Path(__file__).resolve().parents[1] / "attndesk" / "resources" / "images"


def shapes() -> Image.Image:
    """A red disc, a blue square and a green triangle on white."""
    image = Image.new("RGB", (SIZE, SIZE), "white")
    draw = ImageDraw.Draw(image)
    draw.ellipse((8, 10, 40, 42), fill=(220, 40, 40))
    draw.rectangle((56, 14, 86, 44), fill=(40, 70, 210))
    draw.polygon([(30, 88), (66, 88), (48, 56)], fill=(30, 160, 60))
    return image


def checkerboard() -> Image.Image:
    """Black and white squares of 12 pixels, one square marked orange."""
    image = Image.new("RGB", (SIZE, SIZE), "white")
    draw = ImageDraw.Draw(image)
    cell = 12
    for r in range(SIZE // cell):
        for c in range(SIZE // cell):
            if (r + c) % 2:
                draw.rectangle((c * cell, r * cell, c * cell + cell - 1, r * cell + cell - 1), fill="black")
    draw.rectangle((5 * cell, 2 * cell, 6 * cell - 1, 3 * cell - 1), fill=(255, 140, 0))
    return image


def rings() -> Image.Image:
    """Concentric rings around an off-centre point."""
    image = Image.new("RGB", (SIZE, SIZE))
    pixels = image.load()
    cx, cy = 38, 52
    for y in range(SIZE):
        for x in range(SIZE):
            d = math.hypot(x - cx, y - cy)
            v = int(127.5 + 127.5 * math.cos(d / 3.0))
            pixels[x, y] = (v, v // 2, 255 - v)
    return image


def stripes() -> Image.Image:
    """Diagonal stripes with one vertical bar across them."""
    image = Image.new("RGB", (SIZE, SIZE))
    pixels = image.load()
    for y in range(SIZE):
        for x in range(SIZE):
            on = ((x + y) // 8) % 2
            pixels[x, y] = (250, 230, 80) if on else (60, 60, 60)
    ImageDraw.Draw(image).rectangle((64, 0, 71, SIZE - 1), fill=(200, 0, 160))
    return image


def face() -> Image.Image:
    """A simple face: where would a class token look?"""
    image = Image.new("RGB", (SIZE, SIZE), (170, 210, 240))
    draw = ImageDraw.Draw(image)
    draw.ellipse((14, 12, 82, 84), fill=(250, 205, 150), outline=(120, 80, 40), width=2)
    draw.ellipse((30, 32, 40, 42), fill="black")
    draw.ellipse((56, 32, 66, 42), fill="black")
    draw.arc((30, 44, 66, 70), start=20, end=160, fill=(160, 30, 30), width=3)
    return image


IMAGES = {"shapes": shapes, "checkerboard": checkerboard, "rings": rings, "stripes": stripes, "face": face}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, draw in IMAGES.items():
        draw().save(OUT / f"{name}.png", optimize=True)
        print(OUT / f"{name}.png")


if __name__ == "__main__":
    main()
