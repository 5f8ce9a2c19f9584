"""The HTTP API on real services: every endpoint answers what the SDK answers for the same call,
every error is mapped to its HTTP code with the service's plain message, large uploads are refused
before they are read, CORS is off unless set, and `craftai serve --web` serves the page."""

from __future__ import annotations

import base64
import io
import json
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from craftai import AiClient, CraftAiError, LowResMask, Prompt
from craftai.web.app import build
from craftai.web.settings import WebSettings
from craftai_dev import servers, web
from craftai_dev.segment import mask_of
from craftai_wire import advice
from craftai_wire.vocabulary import PARTS_OF, CutoutAction, GatewayReason, Reason

CLICK = {"x": 200, "y": 150, "foreground": True}
MiB = 1 << 20


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (120, 30, 200)).save(out, format="PNG")
    return out.getvalue()


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    error: dict[str, Any] = response.json()["error"]
    assert error["status"] == response.status_code and error["message"]
    return error


def test_the_schema_documents_every_endpoint(http: httpx.Client) -> None:
    schema = http.get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    assert set(paths) >= {
        "/api/v1/status",
        "/api/v1/setup",
        "/api/v1/remove-background",
        "/api/v1/sessions",
        "/api/v1/sessions/{session_id}/segment",
        "/api/v1/sessions/{session_id}/everything",
        "/api/v1/sessions/{session_id}",
    }
    body = paths["/api/v1/remove-background"]["post"]["requestBody"]["content"]
    assert {"multipart/form-data", "image/png", "application/octet-stream"} <= set(body)
    assert "429" in paths["/api/v1/sessions"]["post"]["responses"]


def test_status_names_the_device_and_the_routes(http: httpx.Client, sdk: AiClient) -> None:
    status = http.get("/api/v1/status").json()
    assert status["runtime"]["device"] == sdk.runtime().device == "cpu"
    states = {(r["route"]["recipe"], r["route"]["engine"]): r["state"] for r in status["routes"]}
    assert states[("u2netp", "onnxruntime")] in ("ROUTE_STATE_PREPARED", "ROUTE_STATE_READY")
    assert status["resolved"]["image.matte"]["route"]["recipe"] == sdk.resolve("image.matte").route.recipe
    assert status["resolved"]["image.segment"]["reason"]


def test_remove_background_raw_body_and_multipart(http: httpx.Client, sdk: AiClient, photo: Path) -> None:
    expected = sdk.remove_background(photo, outputs="matte,cutout", recipe="u2netp")
    raw = http.post("/api/v1/remove-background?recipe=u2netp", content=photo.read_bytes())
    assert raw.status_code == 200 and raw.headers["content-type"] == "image/png"
    assert raw.content == expected.cutout_png  # the default output is the cutout
    assert (raw.headers["x-craftai-recipe"], raw.headers["x-craftai-device"]) == ("u2netp", "cpu")
    assert "model;dur=" in raw.headers["server-timing"] and raw.headers["x-request-id"]

    files = {"picture": ("chelsea.png", photo.read_bytes(), "image/png")}
    form = http.post("/api/v1/remove-background", files=files, data={"outputs": "matte,cutout", "recipe": "u2netp"})
    answer = form.json()
    assert (answer["width"], answer["height"], answer["recipe"]) == (expected.width, expected.height, "u2netp")
    assert base64.b64decode(answer["outputs"]["matte"]["data"]) == expected.matte_png
    assert base64.b64decode(answer["outputs"]["cutout"]["data"]) == expected.cutout_png

    matte = http.post(
        "/api/v1/remove-background?outputs=matte&recipe=u2netp",
        content=photo.read_bytes(),
        headers={"Accept": "application/json"},
    )
    assert base64.b64decode(matte.json()["outputs"]["matte"]["data"]) == expected.matte_png


def test_remove_background_takes_the_sdks_options(http: httpx.Client, sdk: AiClient, photo: Path) -> None:
    expected = sdk.remove_background(
        photo, outputs="composite,mask", bg_color="#2a6df4", threshold=0.3, format={"composite": "jpeg"}
    )
    answer = http.post(
        "/api/v1/remove-background?outputs=composite,mask&bg_color=%232a6df4&threshold=0.3&format=composite:jpeg",
        content=photo.read_bytes(),
    ).json()["outputs"]
    assert answer["composite"]["media_type"] == "image/jpeg" and answer["mask"]["format"] == "png"
    assert expected.composite is not None and expected.mask is not None
    assert base64.b64decode(answer["composite"]["data"]) == expected.composite.data
    assert base64.b64decode(answer["mask"]["data"]) == expected.mask.data

    background = _png(64, 48)
    over = sdk.remove_background(photo, outputs="composite", bg_image=background, format="webp")
    files = {"picture": ("c.png", photo.read_bytes(), "image/png"), "background": ("b.png", background, "image/png")}
    one = http.post("/api/v1/remove-background", files=files, data={"outputs": "composite", "format": "webp"})
    assert one.headers["content-type"] == "image/webp" and over.composite is not None
    assert one.content == over.composite.data and 'filename="composite.webp"' in one.headers["content-disposition"]

    refused = http.post("/api/v1/remove-background?outputs=matte&bg_color=%232a6df4", content=photo.read_bytes())
    with pytest.raises(ValueError) as raised:
        sdk.remove_background(photo, outputs="matte", bg_color="#2a6df4")
    assert refused.status_code == 400 and _error(refused)["message"] == str(raised.value)  # the SDK's own words


def test_the_default_outputs_are_the_sdks(http: httpx.Client, sdk: AiClient, photo: Path) -> None:
    """No outputs named: the cutout; a background makes it the composite, a threshold the mask, as
    the SDK answers without outputs (one rule: craftai.calls.default_outputs)."""
    data = photo.read_bytes()
    over = http.post("/api/v1/remove-background?bg_color=%232a6df4&format=jpeg", content=data)
    expected = sdk.remove_background(photo, bg_color="#2a6df4", format="jpeg")
    assert expected.composite is not None and expected.cutout is None
    assert over.status_code == 200 and over.headers["content-type"] == "image/jpeg"
    assert over.content == expected.composite.data
    mask = http.post("/api/v1/remove-background?threshold=0.3", content=data)
    expected_mask = sdk.remove_background(photo, threshold=0.3).mask
    assert expected_mask is not None and 'filename="mask.png"' in mask.headers["content-disposition"]
    assert mask.content == expected_mask.data
    form = http.post(
        "/api/v1/remove-background",
        files={"picture": ("c.png", data, "image/png"), "background": ("b.png", _png(64, 48), "image/png")},
    )
    assert form.status_code == 200 and 'filename="composite.png"' in form.headers["content-disposition"]


def test_parameters_an_endpoint_does_not_take_are_refused_by_name(http: httpx.Client, photo: Path) -> None:
    data = photo.read_bytes()
    rembg = http.post("/api/v1/remove-background?only_mask=true", content=data)
    error = _error(rembg)
    assert rembg.status_code == 400 and (error["code"], error["reason"]) == ("INVALID_ARGUMENT", "UNKNOWN_PARAMETER")
    assert "query parameter 'only_mask'" in error["message"] and "outputs=matte" in error["message"]
    assert error["violations"][0]["field"] == "only_mask" and "threshold" in error["message"]  # the known ones listed
    both = http.post("/api/v1/remove-background?model=u2netp&bgc=255,0,0,255", content=data)
    assert "'bgc', 'model'" in _error(both)["message"] and "recipe=u2netp" in _error(both)["message"]
    cloth = _error(http.post("/api/v1/remove-background?cc=upper", content=data))
    assert "'cc'" in cloth["message"] and "part=upper, lower or full" in cloth["message"]
    form = http.post("/api/v1/remove-background", files={"picture": ("c.png", data, "image/png")}, data={"om": "1"})
    assert form.status_code == 400 and "form field 'om'" in _error(form)["message"]
    stray = http.post(
        "/api/v1/remove-background",
        files={"picture": ("c.png", data, "image/png"), "backdrop": ("b.png", _png(8, 8), "image/png")},
    )
    assert stray.status_code == 400 and "file field 'backdrop'" in _error(stray)["message"]
    status = http.get("/api/v1/status?verbose=1")
    assert status.status_code == 400 and _error(status)["reason"] == "UNKNOWN_PARAMETER"
    setup = http.post("/api/v1/setup", json={"feature": "image.matte", "recipes": "u2netp"})
    assert setup.status_code == 400 and "JSON field 'recipes'" in _error(setup)["message"]
    assert "recipe" in _error(setup)["message"].split("it takes ", 1)[1]
    opened = http.post("/api/v1/sessions?engine=onnxruntime&size=9", content=data)
    assert opened.status_code == 400 and "'size'" in _error(opened)["message"]


def test_raw_pixels_are_refused_over_http_in_words(http: httpx.Client, photo: Path) -> None:
    """Raw bytes carry no size and no media type a browser opens: 400 on the format, naming what to
    ask instead, for one format or one output's; the page offers no raw."""
    for query in ("format=raw", "outputs=matte,cutout&format=cutout:raw,matte:png"):
        answer = http.post(f"/api/v1/remove-background?{query}", content=photo.read_bytes())
        error = _error(answer)
        assert answer.status_code == 400 and error["code"] == "INVALID_ARGUMENT", query
        assert error["violations"][0]["field"] == "format" and "format raw" in error["message"]
        assert "ask for png (lossless: the same pixels) or webp" in error["message"]
    page = http.get("/")
    assert page.status_code == 200 and 'id="format"' in page.text and 'value="raw"' not in page.text


def test_a_part_is_passed_on_and_refused_by_a_recipe_without_parts(http: httpx.Client, photo: Path) -> None:
    answer = http.post("/api/v1/remove-background?outputs=matte&part=upper&recipe=u2netp", content=photo.read_bytes())
    error = _error(answer)
    assert answer.status_code == 400 and (error["code"], error["reason"]) == ("INVALID_ARGUMENT", "BAD_OPTIONS")
    assert "u2netp has no parts" in error["message"] and "u2net_cloth_seg (upper, lower, full)" in error["message"]
    hat = _error(http.post("/api/v1/remove-background?part=hat", content=photo.read_bytes()))
    assert hat["code"] == "INVALID_ARGUMENT" and "'hat' is not a part" in hat["message"]


def test_every_error_has_a_code_and_a_reason(http: httpx.Client, gateway: servers.Process) -> None:
    """The framework's own refusals too: no such path, a method the path does not take, a form
    without its boundary, a body that is not JSON."""
    for answer, status, code, reason in (
        (http.get("/api/v1/nothing-here"), 404, "NOT_FOUND", "NOT_FOUND"),
        (http.delete("/api/v1/status"), 405, "UNIMPLEMENTED", "METHOD_NOT_ALLOWED"),
        (
            http.post("/api/v1/sessions", content=b"--x\r\n", headers={"Content-Type": "multipart/form-data"}),
            400,
            "INVALID_ARGUMENT",
            "BAD_REQUEST",
        ),
        (
            http.post("/api/v1/setup", content=b"{feature:", headers={"Content-Type": "application/json"}),
            400,
            "INVALID_ARGUMENT",
            "BAD_REQUEST",
        ),
    ):
        error = _error(answer)
        assert (answer.status_code, error["code"], error["reason"]) == (status, code, reason), error
    assert http.delete("/api/v1/status").headers["allow"] == "GET"
    assert "takes GET, not DELETE" in _error(http.delete("/api/v1/status"))["message"]
    not_json = _error(http.post("/api/v1/setup", content=b"{feature:", headers={"Content-Type": "application/json"}))
    assert not_json["message"].startswith("the body is not valid JSON") and "at character" in not_json["message"]


def test_a_missing_key_is_explained_in_http_terms(gateway: servers.Process) -> None:
    """The services' words name the SDK's app_key= and the server's key file: an HTTP caller is
    told about the Authorization header instead, and learns no path of the server."""
    answer = httpx.get(f"{gateway.address}/api/v1/status")
    error = _error(answer)
    assert answer.status_code == 401 and error["reason"] == "MISSING_APP_KEY"
    assert "Authorization: Bearer <app key>" in error["message"] and "Craftai-App-Id" in error["message"]
    assert "app_key=" not in error["message"] and "app.key" not in error["message"]
    assert servers.CONFIG_VARIABLE not in error["message"] and ".config" not in error["message"]


def test_the_schema_says_how_to_authenticate_and_what_is_answered(http: httpx.Client) -> None:
    schema = http.get("/api/v1/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        **schema["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    assert '"422"' not in json.dumps(schema) and "HTTPValidationError" not in json.dumps(schema)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert {"bearer": []} in operation["security"], (path, method)
            assert "Craftai-App-Id" in [p["name"] for p in operation["parameters"]], (path, method)
            for status in ("400", "401", "403", "429", "503"):
                answer = operation["responses"][status]["content"]["application/json"]["schema"]
                assert answer == {"$ref": "#/components/schemas/ErrorAnswer"}, (path, method, status)
    matte = schema["paths"]["/api/v1/remove-background"]["post"]["responses"]
    assert {"409", "413", "404"} <= set(matte)
    assert {"502", "507"} <= set(schema["paths"]["/api/v1/setup"]["post"]["responses"])


def test_the_docs_ui_is_served_from_the_gateway(gateway: servers.Process) -> None:
    page = httpx.get(f"{gateway.address}/docs")
    assert page.status_code == 200 and "SwaggerUIBundle" in page.text
    assert "/docs/assets/swagger-ui-bundle.js" in page.text and "/api/v1/openapi.json" in page.text
    assert "://" not in page.text.replace("http://www.w3.org", "")  # nothing from elsewhere
    for asset, kind in (("swagger-ui-bundle.js", "javascript"), ("swagger-ui.css", "text/css")):
        served = httpx.get(f"{gateway.address}/docs/assets/{asset}")
        assert served.status_code == 200 and kind in served.headers["content-type"] and len(served.content) > 10_000
    assert httpx.get(f"{gateway.address}/api").headers["location"] == "/docs"  # where rembg's UI is


@pytest.fixture(scope="module")
def opened(http: httpx.Client, photo: Path) -> Iterator[httpx.Response]:
    """The module's one session (one encoder run): prompted, then counted against the limit, then closed."""
    files = {"picture": ("chelsea.png", photo.read_bytes(), "image/png")}
    response = http.post("/api/v1/sessions", files=files)
    yield response
    if response.status_code == 201:
        http.delete(f"/api/v1/sessions/{response.json()['session_id']}")


def test_a_session_opened_and_prompted(http: httpx.Client, sdk: AiClient, opened: httpx.Response) -> None:
    assert opened.status_code == 201, opened.text
    session = opened.json()
    assert (session["width"], session["height"]) == (451, 300) and session["session_id"]
    assert opened.headers["location"] == f"/api/v1/sessions/{session['session_id']}"
    assert session["recipe"] == sdk.resolve("image.segment").route.recipe and session["device"] == "cpu"
    at = f"/api/v1/sessions/{session['session_id']}"

    same = sdk.resume_session(session["session_id"])  # the very session, through the SDK
    expected = same.segment(points=[(200, 150, True)], formats=["png", "rle", "polygons"], low_res=True)
    refined = same.segment(points=[(200, 150, True), (40, 40, False)], mask_input=expected.best.low_res)
    several = same.segment(prompts=[Prompt(points=[(100, 100)]), Prompt(box=(50, 40, 300, 260))])
    answer = http.post(
        f"{at}/segment", json={"points": [CLICK], "formats": ["png", "rle", "polygons"], "low_res": True}
    )
    assert answer.status_code == 200, answer.text
    mask = answer.json()["masks"][0]
    assert base64.b64decode(mask["png"]) == expected.best.png
    assert mask["rle"] == expected.best.rle.to_coco()  # type: ignore[union-attr]
    assert mask["predicted_iou"] == pytest.approx(expected.best.predicted_iou)
    assert mask["box"] == list(expected.best.box) and mask["area"] == expected.best.area
    assert len(mask["polygons"]) == len(expected.best.polygons)
    assert LowResMask(base64.b64decode(mask["low_res"])) == expected.best.low_res

    fed_back = http.post(
        f"{at}/segment",
        json={"points": [[200, 150, True], [40, 40, False]], "mask_input": mask["low_res"]},
        headers={"Accept": "image/png"},
    )
    assert fed_back.headers["content-type"] == "image/png" and fed_back.content == refined.best.png
    assert float(fed_back.headers["x-craftai-predicted-iou"]) == pytest.approx(refined.best.predicted_iou, abs=1e-6)
    np.testing.assert_array_equal(mask_of(fed_back.content), mask_of(refined.best.png))

    objects = http.post(f"{at}/segment", json={"prompts": [{"points": [[100, 100]]}, {"box": [50, 40, 300, 260]}]})
    got = [base64.b64decode(m["png"]) for m in objects.json()["masks"]]
    assert got == [m.png for m in several.masks] and [m["prompt_index"] for m in objects.json()["masks"]] == [0, 1]


EVERYTHING: dict[str, Any] = {
    "points_per_side": 4,
    "points_per_batch": 5,
    "pred_iou_thresh": 0,
    "stability_score_thresh": 0,
    "box_nms_thresh": 1.0,
}


def test_segment_everything_as_json_and_with_progress(
    http: httpx.Client, sdk: AiClient, opened: httpx.Response
) -> None:
    """The module's session: the SDK's masks for the same options, and with Accept:
    text/event-stream the progress after each batch of clicks, then the same answer."""
    at = f"/api/v1/sessions/{opened.json()['session_id']}/everything"
    expected = sdk.resume_session(opened.json()["session_id"]).segment_everything(formats=["rle", "png"], **EVERYTHING)
    assert len(expected.masks) > 1
    answer = http.post(at, json={**EVERYTHING, "formats": ["rle", "png"]})
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["points"] == expected.points == 16 and found["candidates"] == expected.candidates
    assert [m["rle"] for m in found["masks"]] == [m.rle.to_coco() for m in expected.masks if m.rle]
    assert [base64.b64decode(m["png"]) for m in found["masks"]] == [m.png for m in expected.masks]
    assert [m["stability_score"] for m in found["masks"]] == pytest.approx([m.stability_score for m in expected.masks])
    assert [m["point"] for m in found["masks"]] == [[m.point.x, m.point.y] for m in expected.masks if m.point]

    with http.stream("POST", at, json=EVERYTHING, headers={"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = _events(response.read().decode())
    names = [name for name, _ in events]
    assert names[-1] == "result" and set(names[:-1]) == {"progress"}
    points = [(e["done"], e["total"]) for name, e in events if name == "progress" and e["stage"] == "points"]
    assert points == [(5, 16), (10, 16), (15, 16), (16, 16)]
    assert [m["rle"] for m in events[-1][1]["masks"]] == [m["rle"] for m in found["masks"]]

    bad = http.post(at, json={"points_per_side": 65}, headers={"Accept": "text/event-stream"})
    assert bad.status_code == 400 and "points_per_side" in _error(bad)["message"]  # before any event: an HTTP error
    gone = http.post("/api/v1/sessions/no-such/everything", json=EVERYTHING)
    assert gone.status_code == 404 and _error(gone)["reason"] == "SESSION_NOT_FOUND"


def test_the_apps_limits_are_429_with_retry_after(http: httpx.Client, opened: httpx.Response, photo: Path) -> None:
    """The module's session is the one picture this app may keep (CRAFTAI_MAX_SESSIONS_PER_APP=1)."""
    assert opened.status_code == 201
    second = http.post("/api/v1/sessions", content=photo.read_bytes())
    assert second.status_code == 429 and _error(second)["reason"] == "TOO_MANY_SESSIONS"
    assert int(second.headers["retry-after"]) >= 1


def test_a_closed_session_is_404(http: httpx.Client, opened: httpx.Response) -> None:
    at = f"/api/v1/sessions/{opened.json()['session_id']}"
    assert http.delete(at).status_code == 204
    gone = http.post(f"{at}/segment", json={"points": [CLICK]})
    assert gone.status_code == 404 and _error(gone)["reason"] == "SESSION_NOT_FOUND"
    assert http.delete(at).status_code == 204  # already gone: nothing happens


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((lines["event"], json.loads(lines["data"])))
    return found


def test_setup_streams_server_sent_events(http: httpx.Client) -> None:
    with http.stream("POST", "/api/v1/setup", json={"feature": "image.matte", "recipe": "u2netp"}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = _events(response.read().decode())
    names = [name for name, _ in events]
    assert names[-1] == "result" and set(names[:-1]) <= {"progress", "notice"} and "progress" in names
    progress = [event for name, event in events if name == "progress"]
    assert all(isinstance(p["done"], int) and isinstance(p["total"], int) for p in progress)  # numbers, not strings
    result = events[-1][1]
    assert result["route"]["recipe"] == "u2netp" and result["already_done"] is True
    unknown = http.post("/api/v1/setup", json={"feature": "image.nothing"})
    assert unknown.status_code == 404 and _error(unknown)["reason"] == "UNKNOWN_FEATURE"


def _bad_picture_message(sdk: AiClient) -> str:
    with pytest.raises(CraftAiError) as raised:
        sdk.remove_background(b"this is not a picture", outputs="matte", recipe="u2netp")
    return raised.value.message


def test_errors_carry_their_http_code_and_the_services_words(
    http: httpx.Client, gateway: servers.Process, sdk: AiClient, key: str, photo: Path, opened: httpx.Response
) -> None:
    bad = http.post("/api/v1/remove-background?recipe=u2netp", content=b"this is not a picture")
    assert bad.status_code == 400
    assert (_error(bad)["reason"], _error(bad)["message"]) == ("BAD_PICTURE", _bad_picture_message(sdk))

    if opened.status_code == 201:  # the one picture this app may keep: let this test open its own
        assert http.delete(f"/api/v1/sessions/{opened.json()['session_id']}").status_code == 204
    answer = http.post("/api/v1/sessions", content=photo.read_bytes())
    assert answer.status_code == 201, answer.text
    session = answer.json()["session_id"]
    try:
        outside = http.post(f"/api/v1/sessions/{session}/segment", json={"points": [[999, 10, True]]})
        error = _error(outside)
        assert outside.status_code == 400 and error["reason"] == "BAD_PROMPT"
        assert (
            error["violations"][0]["field"] == "prompt.points[0]" and "outside the 451x300 picture" in error["message"]
        )
        unreadable = http.post(f"/api/v1/sessions/{session}/segment", json={"points": [{"x": "left"}]})
        assert unreadable.status_code == 400 and "points" in _error(unreadable)["message"]
        both = http.post(f"/api/v1/sessions/{session}/segment?answer=png", json={"points": [CLICK], "formats": ["rle"]})
        assert both.status_code == 400 and "png" in _error(both)["message"]
    finally:
        http.delete(f"/api/v1/sessions/{session}")

    no_key = httpx.post(f"{gateway.address}/api/v1/remove-background", content=photo.read_bytes())
    assert no_key.status_code == 401 and _error(no_key)["reason"] == "MISSING_APP_KEY"
    assert no_key.headers["www-authenticate"].startswith("Bearer")
    not_bearer = httpx.get(f"{gateway.address}/api/v1/status", headers={"Authorization": f"Basic {key}"})
    assert not_bearer.status_code == 401 and "Bearer" in _error(not_bearer)["message"]
    wrong = httpx.get(f"{gateway.address}/api/v1/status", headers={"Authorization": "Bearer craftai_wrong"})
    assert wrong.status_code == 403 and _error(wrong)["reason"] == "BAD_APP_KEY"
    by_header = httpx.get(
        f"{gateway.address}/api/v1/status", headers={"Craftai-App-Id": "header-app", "Craftai-App-Key": key}
    )
    assert by_header.status_code == 200

    unknown = http.post("/api/v1/remove-background?recipe=no-such", content=photo.read_bytes())
    assert unknown.status_code == 404 and _error(unknown)["reason"] == "UNKNOWN_RECIPE"
    not_set_up = http.post("/api/v1/remove-background?recipe=inspyrenet-swinb", content=photo.read_bytes())
    assert not_set_up.status_code == 409 and _error(not_set_up)["reason"] == "ROUTE_NOT_SET_UP"
    assert "set up image.matte" in _error(not_set_up)["message"]
    huge = http.post("/api/v1/remove-background?recipe=u2netp", content=_png(20_000, 1))
    assert huge.status_code == 413 and _error(huge)["reason"] == "PICTURE_TOO_LARGE"
    no_picture = http.post(
        "/api/v1/remove-background",
        data={"picture": "http://127.0.0.1/photo.png"},
        files={"background": ("b.png", b"\x89PNG", "image/png")},
    )
    assert no_picture.status_code == 400 and "no picture" in _error(no_picture)["message"]  # no URL is fetched
    options = http.post("/api/v1/remove-background?outputs=halo", content=photo.read_bytes())
    assert options.status_code == 400 and "outputs" in _error(options)["message"]


def _host_port(address: str) -> tuple[str, int]:
    parts = urlsplit(address)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port


def _answer_while_sending(address: str, head: bytes, chunks: int, chunk: bytes, wrap: bool) -> tuple[bytes, int]:
    """Send `head`, then up to `chunks` chunks (chunked encoding when `wrap`) while watching for an
    answer; returns (the answer's first bytes, body bytes sent before it came)."""
    sent = 0
    with socket.create_connection(_host_port(address), timeout=30) as sock:
        sock.sendall(head)
        for _ in range(chunks):
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if wrap else chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
        sock.settimeout(30)
        return web.http_answer(sock), sent


def test_a_50_MB_upload_is_refused_before_it_is_read(gateway: servers.Process, key: str) -> None:
    host, _ = _host_port(gateway.address)
    declared = (
        f"POST /api/v1/remove-background HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: image/png\r\nContent-Length: {50 * 1000 * 1000}\r\n\r\n"
    ).encode()
    answer, sent = _answer_while_sending(gateway.address, declared, 50, b"\0" * 1_000_000, wrap=False)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"CRAFTAI_WEB_MAX_UPLOAD_BYTES" in answer, answer
    assert sent < 20_000_000, sent  # answered on the headers, long before the body's end

    chunked = (
        f"POST /api/v1/remove-background HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    answer, sent = _answer_while_sending(gateway.address, chunked, 50, b"\0" * 1_000_000, wrap=True)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 45_000_000, sent  # refused once past the 32 MiB limit, not after all 50 MB


def test_cors_is_off_by_default_and_settable() -> None:
    preflight = {
        "Origin": "http://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    with TestClient(build(WebSettings(target="127.0.0.1:1")), base_url="http://127.0.0.1") as off:
        assert "access-control-allow-origin" not in off.options("/api/v1/status", headers=preflight).headers
    on_settings = WebSettings(target="127.0.0.1:1", cors_origins="http://app.example")
    with TestClient(build(on_settings), base_url="http://127.0.0.1") as on:
        allowed = on.options("/api/v1/status", headers=preflight)
        assert allowed.headers["access-control-allow-origin"] == "http://app.example"
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()


def test_draining_services_are_503_with_retry_after(
    matte_server: servers.Process, tmp_path: Path, local_catalogue: Path, photo: Path, key: str
) -> None:
    """A second `craftai serve` on the matte store whose model is slow: a request in flight when it
    is told to stop keeps it draining, and a new request through the gateway is answered 503."""
    store = Path(matte_server.env["CRAFTAI_STORE"])
    env = {
        "CRAFTAI_RECIPES": str(local_catalogue),
        "CRAFTAI_FAULT_INJECTION": "slow-model",
        "CRAFTAI_GRACE_SECONDS": "30",
    }
    slow = servers.embedded(store, tmp_path / "slow", env)
    front = web.gateway(slow.address, tmp_path / "gateway", {"CRAFTAI_WEB_RETRY_SECONDS": "1"})
    headers = {"Authorization": f"Bearer {key}"}
    try:
        in_flight: list[httpx.Response] = []
        call = threading.Thread(
            target=lambda: in_flight.append(
                httpx.post(
                    f"{front.address}/api/v1/remove-background?recipe=u2netp",
                    content=photo.read_bytes(),
                    headers=headers,
                    timeout=120,
                )
            )
        )
        call.start()
        time.sleep(2.0)  # the slow model is working on it
        slow.popen.send_signal(15)
        time.sleep(0.5)
        refused = httpx.post(
            f"{front.address}/api/v1/remove-background?recipe=u2netp",
            content=photo.read_bytes(),
            headers=headers,
            timeout=60,
        )
        assert refused.status_code == 503 and _error(refused)["reason"] == "SHUTTING_DOWN"
        assert int(refused.headers["retry-after"]) >= 1
        call.join(120)
        assert in_flight and in_flight[0].status_code == 200  # the call in flight was finished
    finally:
        front.stop()
        slow.stop()


def test_the_page_gets_the_error_reasons_and_the_advice_from_the_gateway(gateway: servers.Process) -> None:
    """The page's only copy of the reasons and of the recipe advice's rule is the module the gateway
    makes from the wire's own."""
    module = httpx.get(f"{gateway.address}/vocabulary.js")
    assert module.status_code == 200 and module.headers["content-type"].startswith("text/javascript")
    exported = {}
    for part in module.text.split("export const ")[1:]:
        name, value = part.split(" = Object.freeze(", 1)
        exported[name] = json.loads(value.rsplit(");", 1)[0])
    assert exported["Reason"] == {r.name: r.value for enum in (Reason, GatewayReason) for r in enum}
    assert exported["Subjects"] == [s.value for s in advice.Subject]
    assert [(r["subject"], r["gpu"], r["min_side"], r["recipe"]) for r in exported["AdviceRules"]] == [
        (r.subject, r.gpu, r.min_side, r.recipe) for r in advice.RULES
    ]
    assert exported["PartsOf"] == {r.value: [p.value for p in parts] for r, parts in PARTS_OF.items()}
    script = httpx.get(f"{gateway.address}/static/app.js").text
    assert exported["CutoutAction"] == {a.name: a.value for a in CutoutAction}
    assert 'import { AdviceRules, CutoutAction, PartsOf, Reason, Subjects } from "/vocabulary.js";' in script


def test_a_router_serves_alone(services: servers.Process, key: str) -> None:
    """Each endpoint family is a router of its own: the status router on a bare app, with a root
    client to the services, answers as the gateway does."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    from craftai import AsyncAiClient
    from craftai.web.routes import status

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncAiClient(app_id="craftai-web", target=services.address) as root:
            app.state.root = root
            yield

    alone = FastAPI(lifespan=lifespan)
    alone.include_router(status.router)
    alone.state.settings = WebSettings(target=services.address)
    with TestClient(alone, base_url="http://127.0.0.1") as client:
        answer = client.get("/api/v1/status", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200 and answer.json()["runtime"]["device"] == "cpu"
