"""A recipe lives in three registries, keyed differently: the catalogue's data (recipes.toml: recipe,
engine, and a revision where the route is prepared), infer's ROUTES ((recipe, engine) -> the
route's class) and prepare's converters() (revision -> converter). They must agree both ways: a
catalogue route without a class would answer ENGINE_NOT_INSTALLED when loaded, a prepared route
without a converter PREPARATION_FAILED at setup, and an entry on one side only is a route nobody
can reach (docs/ARCHITECTURE.md, "Adding a recipe")."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from craftai_catalogue import recipes
from craftai_infer.routes.registry import ROUTES
from craftai_prepare.conversion import converters

ROUTES_DIR = Path(__file__).resolve().parents[2] / "services/infer/src/craftai_infer/routes"


@dataclass(frozen=True)
class CatalogueRoute:
    recipe: str
    engine: str
    revision: str  # "" where the route needs no preparation


def catalogue_routes() -> list[CatalogueRoute]:
    return [
        CatalogueRoute(recipe.name, route.engine, route.revision)
        for recipe in recipes.load().recipes
        for route in recipe.routes
    ]


def disagreements(
    catalogue: list[CatalogueRoute], factories: Mapping[tuple[str, str], str], revisions: set[str]
) -> list[str]:
    """Every way the three registries disagree, in words (none when they agree)."""
    found = []
    keys = {(c.recipe, c.engine) for c in catalogue}
    found += [f"catalogue route {r}/{e} has no factory in ROUTES" for r, e in sorted(keys - set(factories))]
    found += [f"ROUTES has {r}/{e}, which no catalogue recipe has" for r, e in sorted(set(factories) - keys)]
    prepared = {c.revision for c in catalogue if c.revision}
    found += [f"revision {v} has no converter in converters()" for v in sorted(prepared - revisions)]
    found += [f"converter {v} is the revision of no catalogue route" for v in sorted(revisions - prepared)]
    return found


def test_the_catalogue_infer_and_prepare_registries_agree() -> None:
    assert disagreements(catalogue_routes(), ROUTES, set(converters())) == []


def test_every_factory_names_a_class_of_its_module() -> None:
    """Read from the source (a route's module imports its engine: torch, onnxruntime, openvino)."""
    for key, path in ROUTES.items():
        module, name = path.rsplit(".", 1)
        source = ROUTES_DIR / f"{module}.py"
        assert source.is_file(), (key, path)
        classes = {node.name for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.ClassDef)}
        assert name in classes, (key, path)


def test_an_entry_on_one_side_only_is_found() -> None:
    """The check above must be able to fail, whichever registry has the extra entry."""
    catalogue = [CatalogueRoute("u2netp", "onnxruntime", ""), CatalogueRoute("u2netp", "torch", "u2netp-torch.1")]
    factories = {("u2netp", "onnxruntime"): "u2netp_onnx.U2netpOnnx", ("u2netp", "torch"): "u2netp_torch.U2netpTorch"}
    assert disagreements(catalogue, factories, {"u2netp-torch.1"}) == []
    assert disagreements([*catalogue, CatalogueRoute("u2netp", "openvino", "")], factories, {"u2netp-torch.1"}) == [
        "catalogue route u2netp/openvino has no factory in ROUTES"
    ]
    assert disagreements(catalogue, {**factories, ("sam", "torch"): "sam2_torch.Sam2Torch"}, {"u2netp-torch.1"}) == [
        "ROUTES has sam/torch, which no catalogue recipe has"
    ]
    assert disagreements(catalogue, factories, set()) == ["revision u2netp-torch.1 has no converter in converters()"]
    assert disagreements(catalogue, factories, {"u2netp-torch.1", "sam21-torch.2"}) == [
        "converter sam21-torch.2 is the revision of no catalogue route"
    ]
