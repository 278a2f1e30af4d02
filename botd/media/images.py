"""Images made into what the model APIs take, with Pillow (run in the reading worker).

``fit_image`` opens the bytes as JPEG, PNG, GIF or WebP (Pillow decides, not the name or the
first bytes: a file that only starts like an image cannot be read) and returns them
unchanged when they already fit; otherwise it decodes, turns the picture upright (EXIF
orientation), scales it down to ``IMAGE_MAX_SIDE`` on its long edge and re-encodes it (PNG
when it has transparency, JPEG otherwise) until it is at most ``IMAGE_MAX_BYTES``. An
animated image becomes its first frame. Anything else raises ``ImageUnreadable`` with one
short phrase for the user. Pillow is imported where an image is fitted, in the reading worker
(``worker``): the daemon, which takes only ``FittedImage`` from here, never loads it.

The limits, and why:

* ``IMAGE_MAX_SIDE`` = 2000 px: Anthropic refuses a side over 8000 px, and over 2000 px when
  a request carries many images (a conversation keeps sending its recent ones); OpenAI
  scales to 2048 px; both shrink anything over about 1568 px before the model sees it, so
  nothing visible is lost.
* ``IMAGE_MAX_BYTES`` = 3.75 MiB: Anthropic's 5 MB limit per image is counted on the base64
  text, which is 4/3 of the bytes.
* ``IMAGE_MAX_PIXELS`` = 50 megapixels for images decoded whole (PNG, GIF, WebP: up to
  200 MB of RGBA); ``JPEG_MAX_PIXELS`` = 200 megapixels, because libjpeg decodes a large JPEG
  at 1/2 to 1/8 of its size (``draft``) and phones take 200-megapixel photos. Over the limit
  the image is refused from its header, before anything is decoded: a small file can claim
  50000×50000 pixels.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image, ImageFile

IMAGE_MAX_SIDE = 2000
"""The longest edge, in pixels, of an image given to the model; a longer one is scaled down."""
IMAGE_MAX_BYTES = 5 * 1024 * 1024 * 3 // 4
"""The largest image given to the model, in bytes (5 MiB once base64-encoded)."""
IMAGE_MAX_PIXELS = 50_000_000
"""The most pixels an image decoded whole may have; more is refused unread."""
JPEG_MAX_PIXELS = 200_000_000
"""The most pixels of a JPEG, which is decoded at a fraction of its size."""

MIME_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "GIF": "image/gif", "WEBP": "image/webp"}
"""Pillow's name of each format the model APIs take, and its MIME type."""

_SHRINK = 0.75
"""How much smaller each further attempt is when an encoding is still over the byte limit."""


class ImageUnreadable(Exception):
    """The image cannot be given to the model; the message is one short phrase for the user."""


@dataclass(frozen=True)
class FittedImage:
    mime_type: str
    data: bytes
    width: int
    height: int


def fit_image(data: bytes) -> FittedImage:
    """``data`` as an image the model APIs take (see the module docstring)."""
    from PIL import ExifTags, Image

    # Pillow's own bomb check would refuse before the size is known here; the same check is
    # made right after the header is read, before any pixel is decoded.
    Image.MAX_IMAGE_PIXELS = None
    try:
        with Image.open(io.BytesIO(data), formats=list(MIME_TYPES)) as image:
            width, height = image.size
            limit = JPEG_MAX_PIXELS if image.format == "JPEG" else IMAGE_MAX_PIXELS
            if width * height > limit:
                raise ImageUnreadable(f"the image is too large ({width}×{height} pixels)")
            upright = image.getexif().get(ExifTags.Base.Orientation, 1) == 1
            animated = bool(getattr(image, "is_animated", False))
            if (
                max(width, height) <= IMAGE_MAX_SIDE
                and len(data) <= IMAGE_MAX_BYTES
                and upright
                and not animated
                and image.format in MIME_TYPES
            ):
                image.load()  # a truncated or corrupt file fails here
                return FittedImage(MIME_TYPES[image.format], data, width, height)
            return _reencoded(image)
    except (ImageUnreadable, MemoryError):
        raise
    except Exception as exc:  # not an image Pillow opens, or whatever a decoder raises on it
        raise ImageUnreadable("the image could not be read") from exc


def _reencoded(image: ImageFile.ImageFile) -> FittedImage:
    """``image`` (its first frame) upright, scaled to the limits and encoded anew."""
    from PIL import ExifTags, Image, ImageOps

    if image.format == "JPEG":
        # Let libjpeg decode at 1/2, 1/4 or 1/8 of the size when that is still large enough.
        image.draft(None, _within(image.size, IMAGE_MAX_SIDE))
    picture: Image.Image = image
    if image.getexif().get(ExifTags.Base.Orientation, 1) != 1:
        upright = ImageOps.exif_transpose(image)
        assert upright is not None  # not in place: a new image
        picture = upright
    transparent = _transparent(picture)
    mode = "RGBA" if transparent else "RGB"
    if picture.mode != mode:
        picture = picture.convert(mode)
    size = _within(picture.size, IMAGE_MAX_SIDE)
    while True:
        if size != picture.size:
            # reducing_gap: shrink by a whole factor first (fast), then resample the rest.
            picture = picture.resize(size, Image.Resampling.LANCZOS, reducing_gap=2.0)
        out = io.BytesIO()
        if transparent:
            picture.save(out, "PNG")
        else:
            picture.save(out, "JPEG", quality=85)
        if out.tell() <= IMAGE_MAX_BYTES or max(size) == 1:
            break
        size = (max(1, int(size[0] * _SHRINK)), max(1, int(size[1] * _SHRINK)))
    mime = MIME_TYPES["PNG" if transparent else "JPEG"]
    return FittedImage(mime, out.getvalue(), *picture.size)


def _within(size: tuple[int, int], side: int) -> tuple[int, int]:
    """``size`` scaled down (aspect kept) so that its long edge is at most ``side``."""
    width, height = size
    scale = side / max(width, height)
    if scale >= 1:
        return size
    return max(1, round(width * scale)), max(1, round(height * scale))


def _transparent(image: Image.Image) -> bool:
    """Whether some pixel of ``image`` is not fully opaque."""
    if image.mode in ("RGBA", "LA", "PA"):
        alpha = image.getchannel("A")
    elif "transparency" in image.info:
        alpha = image.convert("RGBA").getchannel("A")
    else:
        return False
    lowest_alpha = alpha.getextrema()[0]
    return isinstance(lowest_alpha, int | float) and lowest_alpha < 255


__all__ = [
    "IMAGE_MAX_BYTES",
    "IMAGE_MAX_PIXELS",
    "IMAGE_MAX_SIDE",
    "JPEG_MAX_PIXELS",
    "MIME_TYPES",
    "FittedImage",
    "ImageUnreadable",
    "fit_image",
]
