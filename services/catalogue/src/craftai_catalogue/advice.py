"""Engine advice: which recipe and route suit a machine (GPU present or not)."""

from __future__ import annotations

from dataclasses import dataclass

from craftai_catalogue.recipes import CatalogueData, RecipeSpec, RouteSpec
from craftai_common.errors import failed_precondition, not_found
from craftai_wire.vocabulary import Reason


@dataclass(frozen=True)
class Advice:
    recipe: RecipeSpec
    route: RouteSpec
    reason: str


def _names(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def resolve(data: CatalogueData, feature: str, recipe: str = "", engine: str = "", *, gpu: bool) -> Advice:
    """The route for a request; raises ServiceError with plain words when none fits."""
    spec = data.feature(feature)
    if spec is None:
        raise not_found(
            Reason.UNKNOWN_FEATURE,
            f"unknown feature {feature!r}; known features: {_names([f.name for f in data.features])}",
            feature=feature,
        )
    machine = "a machine with a GPU" if gpu else "a machine without a GPU"
    if recipe:
        chosen = data.recipe(feature, recipe)
        if chosen is None:
            known = [r.name for r in data.recipes_of(feature)]
            raise not_found(
                Reason.UNKNOWN_RECIPE,
                f"{feature} has no recipe {recipe!r}; its recipes: {_names(known)}",
                feature=feature,
                recipe=recipe,
            )
        why = f"recipe {recipe} as asked"
    else:
        default = spec.default_recipe_gpu if gpu else spec.default_recipe_cpu
        chosen = data.recipe(feature, default)
        assert chosen is not None  # checked when the data was loaded
        why = f"recipe {chosen.name} is the default of {feature} on {machine}"
    if not chosen.available:
        raise failed_precondition(
            Reason.RECIPE_UNAVAILABLE,
            f"recipe {chosen.name} of {feature} is not available: {chosen.unavailable_reason}",
            feature=feature,
            recipe=chosen.name,
        )
    if engine:
        route = chosen.route(engine)
        if route is None:
            raise not_found(
                Reason.UNKNOWN_ENGINE,
                f"recipe {chosen.name} has no {engine!r} route; its engines: "
                f"{_names([r.engine for r in chosen.routes])}",
                feature=feature,
                recipe=chosen.name,
                engine=engine,
            )
        return Advice(chosen, route, f"{why}; engine {engine} as asked")
    if gpu:
        route = next((r for r in chosen.routes if r.prefer_on_gpu), chosen.routes[0])
        return Advice(chosen, route, f"{why}; engine {route.engine} is preferred when a GPU answers")
    quick = next((r for r in chosen.routes if r.quick_on_cpu), None)
    if quick is not None:
        return Advice(chosen, quick, f"{why}; engine {quick.engine} is quick on a CPU")
    route = chosen.routes[0]
    return Advice(
        chosen, route, f"{why}; engine {route.engine} (no route of it is quick on a CPU: expect it to be slow)"
    )
