"""The route list imports nothing until a route is built: an infer service installed without torch
(`craftai-infer[onnx-cpu]`) starts, lists its routes and runs u2netp on onnxruntime; asking for a
route that needs torch there (a torch route, or birefnet's onnxruntime one, whose pipeline is
torch's) is answered in plain words with the extra to install. Run in a subprocess whose
`import torch` fails, as it does where torch is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from craftai_dev.files import sample_photo, u2netp_onnx

WITHOUT_TORCH = r"""
import json, sys
sys.modules["torch"] = None  # `import torch` now raises ModuleNotFoundError, as without the package
import numpy as np
from PIL import Image
from craftai_common.errors import ServiceError
from craftai_infer.routes import RouteFiles
from craftai_infer.routes.registry import factories
import craftai_infer.service  # the service's own modules import without torch
found = factories()
route = found[("u2netp", "onnxruntime")](RouteFiles({"network": sys.argv[1]}, None, 1), "cpu")
(matte,) = route.matte([np.asarray(Image.open(sys.argv[2]).convert("RGB"))])
refused = {}
for key in [("sam2.1-hiera-tiny", "torch"), ("birefnet-lite", "onnxruntime")]:  # the latter's pipeline is torch's
    try:
        found[key](RouteFiles({}, None, 1), "cpu")
    except ServiceError as exc:
        refused["/".join(key)] = {"code": exc.code.name, "reason": str(exc.reason), "message": str(exc)}
print(json.dumps({"listed": sorted(engine for _, engine in found), "matte": list(matte.shape), "refused": refused,
                  "torch_imported": sys.modules.get("torch") is not None}))
"""


def test_an_infer_without_torch_lists_its_routes_runs_onnxruntime_and_names_the_missing_extra() -> None:
    photo = sample_photo("astronaut.png")
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, str(u2netp_onnx()), str(photo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(answer["listed"]) == {"onnxruntime", "torch", "openvino"} and not answer["torch_imported"]
    assert answer["matte"] == [512, 512]
    assert sorted(answer["refused"]) == ["birefnet-lite/onnxruntime", "sam2.1-hiera-tiny/torch"], answer["refused"]
    for refused in answer["refused"].values():
        assert (refused["code"], refused["reason"]) == ("FAILED_PRECONDITION", "ENGINE_NOT_INSTALLED")
        assert "needs torch" in refused["message"] and "craftai-infer[torch]" in refused["message"], refused["message"]
