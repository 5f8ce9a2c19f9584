"""`craftai models [FEATURE]`: every recipe the catalogue offers, with what it is for, its download,
its engines and its licence, the default of each feature marked, and what its network took a
picture on this server where it has run here (starts no server, as status)."""

from __future__ import annotations

import argparse

from craftai.cli.connection import connect
from craftai.cli.tables import aligned
from craftai.errors import CraftAiError
from craftai.installation import MeasuredRoute, RecipeInfo
from craftai_wire.vocabulary import Feature


def download(recipe: RecipeInfo) -> str:
    """What setting the recipe up fetches, in MB: one figure where every route fetches as much,
    else each engine's (the catalogue says each route's, `download_bytes`)."""
    sizes = {route.engine: route.download_bytes for route in recipe.routes}
    if len(set(sizes.values())) <= 1:
        return f"{next(iter(sizes.values()), 0) / 1e6:.1f} MB"
    return ", ".join(f"{size / 1e6:.1f} MB ({engine})" for engine, size in sizes.items())


def measured_here(recipe: str, measured: tuple[MeasuredRoute, ...]) -> str:
    """What the recipe's network took a picture on this server, per engine and device it ran on."""
    found = [m for m in measured if m.route.recipe == recipe]
    if not found:
        return "not run here yet"
    return "here: " + ", ".join(
        f"{m.network_ms:,.0f} ms a picture ({m.route.engine} on {m.device}, median of {min(m.pictures, 32)})"
        for m in found
    )


def cmd_models(options: argparse.Namespace) -> int:
    with connect(options, start_server=False) as ai:  # looking starts nothing
        features = ai.features()
        try:
            measured = ai.runtime().measured
        except CraftAiError:  # a catalogue without an infer service beside it: nothing measured
            measured = ()
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
            if feature.name == Feature.MATTE:
                print(" " * 4 + measured_here(recipe.name, measured))
    return 0
