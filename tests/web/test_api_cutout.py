"""/api/v1/cutouts on real services: a cutout opened, refined with the whole list of prompts each
time (the answer the SDK's session gives for the same list, byte for byte), undone by sending the
list without its last prompt, closed; refusals in HTTP terms. Its own app id: the API suite's app
may keep one session only (tests/web/conftest.py)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from craftai import AiClient, CutoutPrompt
from craftai_dev import servers

APP = "cutout-api-tests"
KEEP = {"action": "keep", "points": [[300, 200]]}
REMOVE = {"action": "remove", "box": [10, 10, 150, 120]}


@pytest.fixture(scope="module")
def api(gateway: servers.Process, key: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {key}", "Craftai-App-Id": APP}
    with httpx.Client(base_url=gateway.address, headers=headers, timeout=120) as client:
        yield client


def _outputs(response: httpx.Response) -> dict[str, bytes]:
    assert response.status_code in (200, 201), response.text[:300]
    return {name: base64.b64decode(o["data"]) for name, o in response.json()["outputs"].items()}


def test_a_cutout_opened_refined_undone_and_closed(api: httpx.Client, services: servers.Process, photo: Path) -> None:
    files = {"picture": ("chelsea.png", photo.read_bytes(), "image/png")}
    opened = api.post("/api/v1/cutouts", params={"outputs": "matte,cutout"}, files=files)
    assert opened.status_code == 201, opened.text[:300]
    body: dict[str, Any] = opened.json()
    at = f"/api/v1/cutouts/{body['session_id']}"
    assert opened.headers["location"] == at and body["prompts"] == 0 and body["changed_pixels"] == 0
    assert (body["width"], body["height"]) == (451, 300)

    both = api.post(f"{at}/refine", json={"prompts": [KEEP, REMOVE]})
    assert both.json()["prompts"] == 2 and both.json()["changed_pixels"] > 0
    undone = api.post(f"{at}/refine", json={"prompts": [KEEP]})
    keep_only = api.post(f"{at}/refine", json={"prompts": [KEEP]})
    assert _outputs(undone) == _outputs(keep_only) != _outputs(both)
    assert _outputs(api.post(f"{at}/refine", json={"prompts": []})) == _outputs(opened)

    image = api.post(f"{at}/refine", params={"answer": "image"}, json={"prompts": [KEEP]})
    assert image.headers["content-type"] == "application/json"  # two outputs: JSON, as remove-background answers
    assert api.delete(at).status_code == 204
    gone = api.post(f"{at}/refine", json={"prompts": [KEEP]})
    assert gone.status_code == 404 and gone.json()["error"]["reason"] == "SESSION_NOT_FOUND"

    # the apps of the local key may keep one picture here: the SDK's session once the gateway's is closed
    with AiClient(app_id=APP, target=services.address) as ai, ai.open_cutout(photo, outputs="matte,cutout") as c:
        expected = c.refine([CutoutPrompt("keep", points=[(300, 200)]), CutoutPrompt("remove", box=(10, 10, 150, 120))])
    assert expected.matte is not None and expected.cutout is not None
    assert _outputs(both) == {"matte": expected.matte.data, "cutout": expected.cutout.data}


def test_one_output_as_an_image_and_refusals_in_http_terms(api: httpx.Client, photo: Path) -> None:
    opened = api.post("/api/v1/cutouts", params={"outputs": "matte", "answer": "image"}, content=photo.read_bytes())
    assert opened.status_code == 201 and opened.headers["content-type"] == "image/png"
    at = f"/api/v1/cutouts/{opened.headers['x-craftai-session-id']}"
    try:
        kept = api.post(f"{at}/refine", params={"answer": "image"}, json={"prompts": [KEEP]})
        assert kept.headers["content-type"] == "image/png" and int(kept.headers["x-craftai-changed-pixels"]) > 0
        bad = api.post(f"{at}/refine", json={"prompts": [{"action": "erase", "points": [[1, 1]]}]})
        assert bad.status_code == 400 and "prompts" in bad.text
        empty = api.post(f"{at}/refine", json={"prompts": [{"action": "keep"}]})
        assert empty.status_code == 400 and "needs points or a box" in empty.json()["error"]["message"]
        outside = api.post(f"{at}/refine", json={"prompts": [{"action": "keep", "points": [[9000, 1]]}]})
        assert outside.status_code == 400 and outside.json()["error"]["reason"] == "BAD_PROMPT"
        stranger = api.post("/api/v1/cutouts", params={"mode": "fix"}, content=photo.read_bytes())
        assert stranger.status_code == 400 and stranger.json()["error"]["reason"] == "UNKNOWN_PARAMETER"
    finally:
        api.delete(at)


def test_the_schema_documents_the_cutouts(api: httpx.Client) -> None:
    paths = api.get("/api/v1/openapi.json").json()["paths"]
    assert {"/api/v1/cutouts", "/api/v1/cutouts/{session_id}/refine", "/api/v1/cutouts/{session_id}"} <= set(paths)
    assert {"outputs", "segment_recipe", "recipe"} <= {
        p["name"] for p in paths["/api/v1/cutouts"]["post"]["parameters"]
    }
