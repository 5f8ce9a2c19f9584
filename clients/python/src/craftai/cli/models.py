"""`craftai models [FEATURE]`: every recipe the catalogue offers, with what it is for, its download,
its engines and its licence, the default of each feature marked (starts no server, as status)."""

from __future__ import annotations

import argparse

from craftai.cli.connection import connect
from craftai.cli.tables import aligned
from craftai.installation import RecipeInfo


def download(recipe: RecipeInfo) -> str:
    """The bytes every route of the recipe fetches together (each file once), in MB."""
    return f"{sum(f.size for f in recipe.files) / 1e6:.1f} MB"


def cmd_models(options: argparse.Namespace) -> int:
    with connect(options, start_server=False) as ai:  # looking starts nothing
        features = ai.features()
    for feature in features:
        if options.feature and feature.name != options.feature:
            continue
        print(f"{feature.name} ({feature.title}); * the default here")
        rows = [
            (
                ("* " if recipe.name == feature.default_recipe else "  ") + recipe.name,
                download(recipe),
                ", ".join(route.engine for route in recipe.routes),
                recipe.license if recipe.available else f"not offered: {recipe.unavailable_reason}",
            )
            for recipe in feature.recipes
        ]
        for line, recipe in zip(aligned(rows), feature.recipes, strict=True):
            print(line)
            print(" " * 4 + recipe.network)
    return 0
