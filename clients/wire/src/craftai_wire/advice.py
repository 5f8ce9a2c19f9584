"""Which image.matte recipe suits a picture: the rule behind `--recipe auto` (docs/API.md, "Choosing
a recipe"), from the subject the app names, the device of the infer service and the picture's longer
side. Defined once here, where the CLI, the SDK's callers and the status output read it.

A rule of thumb from what each model was trained on and what it costs, not a measured quality
ranking (the tests cannot run the real weights): a subject's specialist where one is offered, the
feature's default otherwise, and on a CPU the networks that answer in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from craftai_wire.vocabulary import Recipe

AUTO = "auto"  # the recipe name that asks for this advice


class Subject(StrEnum):
    GENERAL = "general"
    PORTRAIT = "portrait"
    PRODUCT = "product"
    ANIME = "anime"


@dataclass(frozen=True)
class Row:
    """`recipe` for pictures of `subject` on a GPU (`gpu`) or not, whose longer side is at least
    `min_side`; the first row that fits is the advice."""

    subject: Subject
    gpu: bool
    min_side: int
    recipe: Recipe
    why: str


HIGH_RESOLUTION = 2048
RULES: tuple[Row, ...] = (
    Row(Subject.ANIME, True, 0, Recipe.ISNET_ANIME, "trained on anime characters"),
    Row(Subject.ANIME, False, 0, Recipe.ISNET_ANIME, "trained on anime characters (the only one; slow on a CPU)"),
    Row(Subject.PORTRAIT, True, 0, Recipe.BIREFNET_PORTRAIT, "BiRefNet trained for portraits"),
    Row(Subject.PORTRAIT, False, 0, Recipe.U2NET_HUMAN_SEG, "U²-Net trained for people, quick on a CPU"),
    Row(Subject.PRODUCT, True, 0, Recipe.BIREFNET_DIS, "BiRefNet trained for objects with fine structure"),
    Row(Subject.PRODUCT, False, 0, Recipe.U2NET, "the full U²-Net, quick on a CPU"),
    Row(
        Subject.GENERAL,
        True,
        HIGH_RESOLUTION,
        Recipe.BIREFNET_HR,
        f"BiRefNet Swin-L trained at 2048² for pictures of {HIGH_RESOLUTION} px and more",
    ),
    Row(Subject.GENERAL, True, 0, Recipe.INSPYRENET_SWINB, "the default on a GPU"),
    Row(Subject.GENERAL, False, 0, Recipe.U2NETP, "the default on a CPU, quickest"),
)


def advise(subject: Subject | str, longer_side: int, *, gpu: bool) -> Row:
    """The first rule for `subject` on this device that the picture's longer side reaches."""
    wanted = Subject(subject)
    for row in RULES:
        if row.subject == wanted and row.gpu == gpu and longer_side >= row.min_side:
            return row
    raise AssertionError(f"no rule for {wanted} on {'a GPU' if gpu else 'a CPU'}")  # every subject has a 0 row


def table() -> list[str]:
    """The rule as lines to print: subject, device, size, recipe, why."""
    lines = []
    for row in RULES:
        size = f">= {row.min_side} px" if row.min_side else "any size"
        lines.append(f"{row.subject:<9} {'GPU' if row.gpu else 'CPU'}  {size:<12} {row.recipe:<19} {row.why}")
    return lines
