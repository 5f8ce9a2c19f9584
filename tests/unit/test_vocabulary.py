"""The wire's vocabulary is defined once (craftai_wire.vocabulary) and every other table agrees.

Two kinds of check. A reason is never spelled as a quoted literal in the product's sources (Python
and JavaScript under services/, clients/ and tools/) outside the wire package: they import
`Reason`, so a renamed or removed reason fails where it is used, not in a caller's `if`. (Tests
do spell reasons: a test that writes the string checks the contract as a caller sees it.) And the
tables that must stay spelled elsewhere - the proto enums, the typing `Literal`s of the pipeline
and of the SDK's hints, the recipe data, the route registry, the features' names - name exactly
what the vocabulary names, so an entry added on one side only fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import get_args

import pytest
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

from craftai import calls, outputs
from craftai.cli.parser import ENGINES
from craftai_catalogue import recipes
from craftai_infer import encodings, loader, masks, matte_options
from craftai_infer.features import matte, segment
from craftai_infer.pipelines import matte_spec
from craftai_infer.routes import registry
from craftai_wire import vocabulary
from craftai_wire.v1 import catalogue_pb2, infer_pb2
from craftai_wire.vocabulary import (
    IMAGE_FORMATS,
    MASK_FORMAT_OF,
    MASK_FORMATS,
    OUTPUT_KINDS,
    OUTPUT_OF,
    RECIPES_OF,
    ROUTE_STATES,
    Engine,
    Feature,
    ImageFormat,
    NoticeCode,
    Output,
    Reason,
    Recipe,
    RouteState,
)

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("services", "clients", "tools")
WIRE = REPO / "clients/wire/src/craftai_wire"
SUFFIXES = (".py", ".js")
# Files that may still spell reasons, each with why; the test fails when one no longer does, so
# that this list only shrinks.
ALLOWED: dict[str, str] = {}


def literals(text: str, words: Iterable[str]) -> list[str]:
    """The words of `words` that `text` spells as a quoted literal ("X", 'X' or `X`)."""
    alternatives = "|".join(re.escape(w) for w in words)
    pattern = re.compile(rf"""(["'`])({alternatives})\1""")
    return sorted({found.group(2) for found in pattern.finditer(text)})


def _sources() -> dict[str, list[str]]:
    spelled = {}
    for root in SCANNED:
        for path in sorted((REPO / root).rglob("*")):
            if path.suffix not in SUFFIXES or WIRE in path.parents or ".venv" in path.parts:
                continue
            found = literals(path.read_text(encoding="utf-8"), Reason)
            if found:
                spelled[str(path.relative_to(REPO))] = found
    return spelled


def test_the_scan_finds_a_reason_spelled_as_a_literal() -> None:
    """The check below must be able to fail."""
    text = """if error.reason == "SESSION_NOT_FOUND" or r === 'NO_SPACE' || `BAD_APP_KEY` (ROUTE_NOT_SET_UP)"""
    assert literals(text, Reason) == ["BAD_APP_KEY", "NO_SPACE", "SESSION_NOT_FOUND"]
    assert literals('"SESSION_NOT_FOUND_X" and "X_NO_SPACE"', Reason) == []


def test_no_reason_is_spelled_outside_the_wire_package() -> None:
    spelled = _sources()
    outside = {path: found for path, found in spelled.items() if path not in ALLOWED}
    assert not outside, f"import Reason from craftai_wire.vocabulary instead of spelling: {outside}"
    cleared = sorted(set(ALLOWED) - set(spelled))
    assert not cleared, f"these no longer spell a reason: remove them from ALLOWED: {cleared}"


def _every_value(enum: EnumTypeWrapper) -> set[int]:
    """An enum's values but UNSPECIFIED (0), which no name maps to."""
    return {value for value in enum.values() if value != 0}


@pytest.mark.parametrize(
    ("names", "table", "enum"),
    [
        (Output, OUTPUT_KINDS, infer_pb2.MatteOutputKind),
        (ImageFormat, IMAGE_FORMATS, infer_pb2.MatteFormat),
        (vocabulary.MaskFormat, MASK_FORMATS, infer_pb2.MaskFormat),
        (vocabulary.CutoutAction, vocabulary.CUTOUT_ACTIONS, infer_pb2.CutoutAction),
        (RouteState, ROUTE_STATES, catalogue_pb2.RouteState),
    ],
)
def test_each_name_is_one_value_of_the_wire_enum_and_each_value_has_a_name(
    names: type[StrEnum], table: Mapping[str, int], enum: EnumTypeWrapper
) -> None:
    assert set(table) == set(names)
    assert sorted(table.values()) == sorted(_every_value(enum))  # one name a value, none left out


def test_the_pipeline_and_the_sdk_name_the_outputs_and_formats_of_the_vocabulary() -> None:
    assert get_args(matte_spec.Kind) == tuple(Output)
    assert get_args(encodings.Format) == tuple(ImageFormat)
    assert dict(MASK_FORMAT_OF) == masks.NAMES
    assert dict(OUTPUT_OF) == matte_options.KIND_OF
    assert dict(IMAGE_FORMATS) == matte_options.FORMAT_VALUES
    literal, enum = get_args(outputs.MaskFormat)
    assert get_args(literal) == tuple(vocabulary.MaskFormat) and enum is vocabulary.MaskFormat
    assert set(outputs.SUFFIXES) == set(outputs.MEDIA_TYPES) == set(ImageFormat)


def test_the_engines_of_the_catalogue_the_registry_and_the_command_are_the_vocabularys() -> None:
    assert recipes.ENGINES == ENGINES == tuple(Engine)
    assert set(registry.EXTRAS) == set(Engine)
    assert {engine for _, engine in registry.ROUTES} <= set(Engine)
    data = recipes.load()
    assert {route.engine for recipe in data.recipes for route in recipe.routes} == set(Engine)


def test_the_features_of_the_catalogue_and_of_infer_are_the_vocabularys() -> None:
    data = recipes.load()
    assert {feature.name for feature in data.features} == set(Feature)
    assert {recipe.feature for recipe in data.recipes} == set(Feature)
    assert (matte.FEATURE, segment.FEATURE) == (Feature.MATTE, Feature.SEGMENT)
    assert (calls.MATTE_FEATURE, calls.SEGMENT_FEATURE) == (Feature.MATTE, Feature.SEGMENT)


def test_the_recipes_of_the_catalogue_are_the_vocabularys_by_feature() -> None:
    data = recipes.load()
    found = {feature: tuple(r.name for r in data.recipes if r.feature == feature) for feature in Feature}
    assert {feature: set(names) for feature, names in found.items()} == {
        feature: set(names) for feature, names in RECIPES_OF.items()
    }
    assert set(Recipe) == {recipe.name for recipe in data.recipes}


def test_the_notice_infer_sends_is_the_vocabularys() -> None:
    assert loader.FELL_BACK_TO_CPU == NoticeCode.FELL_BACK_TO_CPU
