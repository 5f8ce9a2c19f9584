"""The rule behind --recipe auto (craftai_wire.advice): every subject answered on both devices at any
size, the first fitting row wins, and every recipe it names is an available recipe of image.matte in
the catalogue's data (a recipe renamed or withdrawn there fails here, not on a user's picture)."""

from __future__ import annotations

import pytest

from craftai_catalogue import recipes
from craftai_wire.advice import HIGH_RESOLUTION, RULES, Subject, advise, table
from craftai_wire.vocabulary import Feature, Recipe


@pytest.mark.parametrize("subject", list(Subject))
@pytest.mark.parametrize("gpu", [True, False])
def test_every_subject_has_advice_on_each_device_at_any_size(subject: Subject, gpu: bool) -> None:
    for side in (1, 512, HIGH_RESOLUTION - 1, HIGH_RESOLUTION, 10_000):
        row = advise(subject, side, gpu=gpu)
        assert (row.subject, row.gpu) == (subject, gpu) and side >= row.min_side


def test_the_first_fitting_row_wins() -> None:
    assert advise("general", HIGH_RESOLUTION, gpu=True).recipe == Recipe.BIREFNET_HR
    assert advise("general", HIGH_RESOLUTION - 1, gpu=True).recipe == Recipe.INSPYRENET_SWINB
    assert advise("general", 10_000, gpu=False).recipe == Recipe.U2NETP
    assert advise(Subject.ANIME, 300, gpu=False).recipe == Recipe.ISNET_ANIME
    with pytest.raises(ValueError):
        advise("landscape", 300, gpu=True)


def test_every_advised_recipe_is_offered_by_the_catalogue() -> None:
    data = recipes.load()
    for row in RULES:
        spec = data.recipe(Feature.MATTE, row.recipe)
        assert spec is not None and spec.available, row
    defaults = {f.name: (f.default_recipe_gpu, f.default_recipe_cpu) for f in data.features}
    gpu_default, cpu_default = defaults[Feature.MATTE]
    assert advise("general", 100, gpu=True).recipe == gpu_default  # general pictures: the feature's defaults
    assert advise("general", 100, gpu=False).recipe == cpu_default


def test_the_printed_table_has_one_line_per_rule() -> None:
    lines = table()
    assert len(lines) == len(RULES) and all(str(row.recipe) in line for row, line in zip(RULES, lines, strict=True))
