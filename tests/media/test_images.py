"""Images users send are made into images the model APIs take, in the reading worker: real
Pillow in real worker processes.

One that fits is passed on unchanged; a large one is scaled to ``IMAGE_MAX_SIDE`` and
re-encoded (JPEG, PNG when it has transparency) to at most ``IMAGE_MAX_BYTES``; a photo
taken sideways is turned upright; an animated one becomes its first frame. A decompression
bomb, a corrupt file, a file that only starts like an image, or one needing more memory
than the worker has is one line.
"""

from __future__ import annotations

import base64
import io
import os

import pytest
from PIL import Image

from botd.chat import Attachment
from botd.events import ImageContent
from botd.media.images import IMAGE_MAX_BYTES, IMAGE_MAX_SIDE
from botd.media.sandbox import Budget, ReadFailed, Sandbox
from tests.media.files import JPEG, PNG, claimed_png, jpeg, png
from tests.media.reading import message, resolver, worker_pids
from tests.support.waiting import HANG_GUARD


async def _read(data: bytes, name: str = "picture") -> tuple[list[str], Image.Image | None]:
    """What the resolver makes of an image sent as a file: its problems, and the image the
    model would get (opened with Pillow; its MIME type and size checked)."""
    resolved = await resolver({"i": data}).resolve(message(Attachment("document", "i", name)))
    if not resolved.blocks:
        assert len(resolved.notes) == len(resolved.problems) == 1
        return resolved.problems, None
    [block] = resolved.blocks
    assert isinstance(block, ImageContent)
    assert len(block.data) <= 5 * 1024 * 1024  # Anthropic's limit, on the base64 text
    image = Image.open(io.BytesIO(base64.b64decode(block.data)))
    assert block.mime_type == Image.MIME[str(image.format)]
    assert max(image.size) <= IMAGE_MAX_SIDE
    return resolved.problems, image


async def test_an_image_that_fits_is_passed_on_unchanged() -> None:
    for data in (PNG, JPEG):
        resolved = await resolver({"i": data}).resolve(message(Attachment("image", "i")))
        [block] = resolved.blocks
        assert isinstance(block, ImageContent) and base64.b64decode(block.data) == data


async def test_a_large_photo_is_scaled_to_the_long_edge_limit_and_stays_jpeg() -> None:
    problems, image = await _read(jpeg((6000, 4000)))
    assert problems == [] and image is not None
    assert image.format == "JPEG"
    assert image.size == (IMAGE_MAX_SIDE, IMAGE_MAX_SIDE * 2 // 3)
    assert image.getpixel((1000, 600)) == pytest.approx((200, 30, 10), abs=4)


async def test_a_large_image_with_transparency_stays_png_and_keeps_it() -> None:
    picture = Image.new("RGBA", (3000, 1000), (0, 0, 255, 255))
    picture.paste((0, 0, 0, 0), (0, 0, 1500, 1000))  # the left half transparent
    out = io.BytesIO()
    picture.save(out, "PNG")
    problems, image = await _read(out.getvalue(), "logo.png")
    assert problems == [] and image is not None
    assert image.format == "PNG" and image.size == (IMAGE_MAX_SIDE, 667)
    assert image.getpixel((10, 300))[3] == 0  # type: ignore[index]
    assert image.getpixel((1990, 300)) == (0, 0, 255, 255)


async def test_an_image_over_the_byte_limit_is_made_smaller() -> None:
    """Small in pixels but big in bytes: random pixels do not compress."""
    noise = Image.frombytes("RGB", (1500, 1500), os.urandom(1500 * 1500 * 3))
    out = io.BytesIO()
    noise.save(out, "PNG", compress_level=1)
    assert len(out.getvalue()) > IMAGE_MAX_BYTES
    problems, image = await _read(out.getvalue())
    assert problems == [] and image is not None
    assert image.format == "JPEG"  # no transparency
    assert max(image.size) <= 1500  # and its bytes within the limit (checked in _read)


async def test_a_photo_taken_sideways_is_turned_upright() -> None:
    # Orientation 6: the camera was turned; the picture is shown turned 90° clockwise.
    sideways = Image.new("RGB", (300, 200), (255, 0, 0))
    sideways.paste((0, 0, 255), (0, 0, 150, 200))  # blue left half, red right half
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    sideways.save(out, "JPEG", exif=exif)
    problems, image = await _read(out.getvalue(), "photo.jpg")
    assert problems == [] and image is not None
    assert image.size == (200, 300)
    assert image.getexif().get(0x0112) is None
    red, _, blue = image.getpixel((100, 20))  # type: ignore[misc]
    assert blue > 200 and red < 50  # the blue left half is on top now
    red, _, blue = image.getpixel((100, 280))  # type: ignore[misc]
    assert red > 200 and blue < 50


async def test_an_animated_gif_becomes_its_first_frame() -> None:
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    frames = [Image.new("RGB", (40, 30), colour) for colour in colours]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    with Image.open(io.BytesIO(out.getvalue())) as sent:
        assert sent.n_frames == 3  # type: ignore[attr-defined]
    problems, image = await _read(out.getvalue(), "moving.gif")
    assert problems == [] and image is not None
    assert image.format == "JPEG" and image.size == (40, 30)  # no transparency: JPEG
    assert image.getpixel((20, 15)) == pytest.approx((255, 0, 0), abs=4)


async def test_a_decompression_bomb_is_refused_by_its_size_unread() -> None:
    problems, _ = await _read(claimed_png(50_000, 50_000), "huge.png")
    assert problems == ["I could not read huge.png: the image is too large (50000×50000 pixels)."]


async def test_a_corrupt_or_fake_image_is_one_line() -> None:
    whole = jpeg((600, 400))
    for data in (whole[: len(whole) // 2], b"\x89PNG\r\n\x1a\n" + bytes(range(64))):
        problems, _ = await _read(data, "broken.jpg")
        assert problems == ["I could not read broken.jpg: the image could not be read."]


async def test_an_image_needing_more_memory_than_the_worker_has_is_one_line() -> None:
    big = png((5000, 5000), (1, 2, 3, 4))  # 100 MB once decoded, and the worker's own 50
    with pytest.raises(ReadFailed, match=r"^reading it needed more than 100 MB of memory$"):
        await Sandbox().fit_image(big, Budget(HANG_GUARD, 60, memory=100 * 2**20))
    assert worker_pids() == set()
