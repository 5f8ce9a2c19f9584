"""image.matte requests as sent by apps (craftai.v1.MatteRequest), checked in plain words.

Two steps, so that a request that can never be answered is refused before any model work:
`check(request, png_level)` needs nothing but the message (the outputs, each once, in a format
that can hold it; the threshold, levels, colour and blur radius in range); `Checked.within(width,
height, background)` checks what needs the decoded pictures (WebP's side limit, a JPEG composite
over a background picture that has transparency) and gives the pipeline's `OutputsSpec`.
`Checked.raw_bytes` is what the raw outputs asked come to, known from the picture's header: the
feature refuses them before any work where they could not fit one message.

A request without `outputs` is one from an SDK older than the outputs and formats: the matte, and
the cutout when `want_cutout` is set, as PNGs in MatteResult.matte_png / cutout_png.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast, get_args

from craftai_common.errors import ServiceError, invalid_argument
from craftai_infer.encodings import WEBP_MAX_SIDE, Encoding, Format
from craftai_infer.pipelines.matte_spec import WHITE, Background, Blur, Cover, Kind, OutputsSpec, Solid
from craftai_infer.pipelines.picture import Picture
from craftai_wire.v1 import infer_pb2
from craftai_wire.vocabulary import IMAGE_FORMATS, OUTPUT_OF, PARTS_OF, Part, Reason, raw_channels

# The wire's enums -> the pipeline's names (the vocabulary's tables; the pipeline types them as Literals).
KIND_OF: dict[int, Kind] = {code: cast(Kind, str(name)) for code, name in OUTPUT_OF.items()}
FORMAT_VALUES: dict[Format, infer_pb2.MatteFormat.ValueType] = {
    cast(Format, str(name)): code for name, code in IMAGE_FORMATS.items()
}
FORMAT_OF: dict[int, Format] = {infer_pb2.MATTE_FORMAT_UNSPECIFIED: "png", **{c: f for f, c in FORMAT_VALUES.items()}}
MAX_BLUR_RADIUS = 500.0
DEFAULT_THRESHOLD = 0.5
DEFAULT_JPEG_QUALITY = 90
# A raw output's most bytes a pixel (MATTE_FORMAT_RAW: vocabulary.raw_channels), the composite's with
# transparency (`Checked.raw_bytes` counts 3 where its background is opaque).
RAW_BYTES_PER_PIXEL: dict[Kind, int] = {kind: raw_channels(kind, has_alpha=True) for kind in get_args(Kind)}


def _bad(field: str, message: str) -> ServiceError:
    return invalid_argument(Reason.BAD_OUTPUT, message, field=field)


@dataclass(frozen=True)
class Checked:
    """A request whose options are valid; `within` checks them against the decoded pictures."""

    kinds: tuple[Kind, ...]  # in the order asked
    encodings: dict[Kind, Encoding]
    naive: bool
    threshold: float
    colour: tuple[int, int, int, int] | None  # the background, when a colour
    blur_radius: float | None  # the background, when a blur
    background_picture: bytes | None  # the background, when a picture (decoded in the decode stage)
    legacy: bool  # no `outputs`: answer matte_png / cutout_png
    part: Part | None = None  # a recipe with parts: the one asked (None: every part's, stacked)

    def for_recipe(self, recipe: str) -> None:
        """INVALID_ARGUMENT where a part is asked of a recipe that has none."""
        if self.part is not None and recipe not in PARTS_OF:
            having = ", ".join(f"{name} ({', '.join(parts)})" for name, parts in PARTS_OF.items())
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                f"{recipe} has no parts, so part {str(self.part)!r} cannot be asked of it; the recipes with parts: "
                f"{having}",
                field="part",
            )

    @property
    def raw(self) -> tuple[Kind, ...]:
        """The outputs asked raw, in the order asked."""
        return tuple(kind for kind in self.kinds if self.encodings[kind].format == "raw")

    def raw_bytes(self, width: int, height: int) -> int:
        """What the raw outputs of a width x height matte come to (a composite over a background
        picture counted RGBA: whether that picture has transparency is known once decoded)."""
        opaque = self.background_picture is None and (self.colour is None or self.colour[3] == 255)
        total = 0
        for kind in self.raw:
            total += raw_channels(kind, has_alpha=not opaque) * width * height
        return total

    def within(self, width: int, height: int, background: Picture | None) -> OutputsSpec:
        """The pipeline's spec; INVALID_ARGUMENT where WebP cannot hold the picture or JPEG the composite."""
        for index, kind in enumerate(self.kinds):
            if self.encodings[kind].format == "webp" and max(width, height) > WEBP_MAX_SIDE:
                raise _bad(
                    f"outputs[{index}].format",
                    f"the picture is {width}x{height}; WebP holds at most {WEBP_MAX_SIDE} pixels a side: ask for PNG",
                )
        chosen: Background
        if background is not None:
            chosen = Cover(background)
        elif self.blur_radius is not None:
            chosen = Blur(self.blur_radius)
        else:
            chosen = Solid(self.colour or WHITE)
        if "composite" in self.kinds and self.encodings["composite"].format == "jpeg" and not chosen.opaque:
            raise _bad(
                f"outputs[{self.kinds.index('composite')}].format",
                "the background picture has transparency, so the composite has too, and JPEG cannot hold it: "
                "ask for PNG or WebP, or send an opaque background",
            )
        return OutputsSpec(frozenset(self.kinds), self.naive, chosen, self.threshold)


def _encoding(request: infer_pb2.MatteRequest, fmt: Format, png_level: int) -> Encoding:
    level = request.png_compress_level if request.HasField("png_compress_level") else png_level
    quality = request.jpeg_quality if request.HasField("jpeg_quality") else DEFAULT_JPEG_QUALITY
    return Encoding(fmt, level, quality)


def _colour(colour: infer_pb2.MatteColor) -> tuple[int, int, int, int]:
    a = colour.a if colour.HasField("a") else 255
    values = (colour.r, colour.g, colour.b, a)
    if max(values) > 255:
        raise _bad(
            "background.color",
            f"the background colour ({', '.join(str(v) for v in values)}) has a channel over 255; "
            "each of r, g, b and a is 0..255",
        )
    return values


def check(request: infer_pb2.MatteRequest, png_level: int) -> Checked:
    """Everything about the request that needs no pixel; INVALID_ARGUMENT naming the field otherwise."""
    legacy = len(request.outputs) == 0
    kinds: list[Kind] = []
    formats: dict[Kind, Format] = {}
    if legacy:
        kinds = ["matte", "cutout"] if request.want_cutout else ["matte"]
        formats = dict.fromkeys(kinds, "png")
    elif request.want_cutout:
        raise _bad(
            "want_cutout",
            "want_cutout is for requests without outputs; with outputs, ask for MATTE_OUTPUT_KIND_CUTOUT there",
        )
    for index, spec in enumerate(request.outputs):
        kind = KIND_OF.get(spec.kind)
        if kind is None:
            name = infer_pb2.MatteOutputKind.Name(spec.kind) if spec.kind in infer_pb2.MatteOutputKind.values() else ""
            raise _bad(
                f"outputs[{index}].kind",
                f"outputs[{index}] has {name or f'kind number {spec.kind}'}; an output is MATTE_OUTPUT_KIND_MATTE, "
                "MATTE_OUTPUT_KIND_CUTOUT, MATTE_OUTPUT_KIND_COMPOSITE or MATTE_OUTPUT_KIND_MASK",
            )
        if kind in kinds:
            raise _bad(
                f"outputs[{index}].kind", f"outputs[{index}] asks for the {kind} again; ask for each output once"
            )
        fmt = FORMAT_OF.get(spec.format)
        if fmt is None:
            raise _bad(
                f"outputs[{index}].format",
                f"outputs[{index}] has format number {spec.format}; a format is MATTE_FORMAT_PNG, MATTE_FORMAT_WEBP, "
                "MATTE_FORMAT_JPEG or MATTE_FORMAT_RAW",
            )
        if fmt == "jpeg" and kind != "composite":
            raise _bad(
                f"outputs[{index}].format",
                f"the {kind} cannot be a JPEG (JPEG holds no alpha and no exact matte: it is for composites over an "
                "opaque background); ask for PNG or WebP",
            )
        kinds.append(kind)
        formats[kind] = fmt
    threshold = request.mask_threshold if request.HasField("mask_threshold") else DEFAULT_THRESHOLD
    if not (math.isfinite(threshold) and 0.0 <= threshold <= 1.0):
        raise _bad("mask_threshold", f"mask_threshold is {threshold:g}; it is a share of full alpha, in [0, 1]")
    if request.HasField("png_compress_level") and not 0 <= request.png_compress_level <= 9:
        raise _bad(
            "png_compress_level",
            f"png_compress_level is {request.png_compress_level}; zlib levels are 0 (none) to 9 (smallest)",
        )
    if request.HasField("jpeg_quality") and not 1 <= request.jpeg_quality <= 100:
        raise _bad("jpeg_quality", f"jpeg_quality is {request.jpeg_quality}; it is 1 to 100")
    which = request.background.WhichOneof("kind")
    colour = _colour(request.background.color) if which == "color" else None
    radius: float | None = None
    if which == "blur_radius":
        radius = request.background.blur_radius
        if not (math.isfinite(radius) and 0.0 < radius <= MAX_BLUR_RADIUS):
            raise _bad(
                "background.blur_radius",
                f"the background blur radius is {radius:g}; it is a Gaussian's standard deviation in pixels, "
                f"more than 0 and at most {MAX_BLUR_RADIUS:g}",
            )
    if "composite" in kinds and formats["composite"] == "jpeg" and colour is not None and colour[3] != 255:
        raise _bad(
            f"outputs[{kinds.index('composite')}].format",
            f"the background colour has alpha {colour[3]}, so the composite has transparency, and JPEG cannot hold "
            "it: ask for PNG or WebP, or an opaque colour",
        )
    picture = request.background.picture.data if which == "picture" else None
    part: Part | None = None
    if request.part:
        try:
            part = Part(request.part)
        except ValueError:
            raise invalid_argument(
                Reason.BAD_OPTIONS,
                f"part is {request.part!r}; a part is {', '.join(Part)} (of a recipe with parts: "
                f"{', '.join(PARTS_OF)})",
                field="part",
            ) from None
    return Checked(
        tuple(kinds),
        {kind: _encoding(request, formats[kind], png_level) for kind in kinds},
        request.naive,
        float(threshold),
        colour,
        radius,
        picture,
        legacy,
        part,
    )
