"""u2netp for image.matte, rembg-compatible pipeline on two engines: the published ONNX through
onnxruntime, and the network written in this project (torch) with weights from the prepared folder."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

from craftai_infer.engines.onnxruntime import OnnxModel
from craftai_infer.pipelines import matte_u2netp
from craftai_infer.routes import RouteFiles


class U2netpOnnx:
    def __init__(self, files: RouteFiles, device: str) -> None:
        self.model = OnnxModel(files.role("network"), device, files.cpu_threads)
        self.device = self.model.device
        self.input_name = self.model.input_names[0]
        # On the CPU two requests may run at once on the one (thread-safe) session: the second uses
        # the cores the first leaves idle (a small network does not keep all of them busy).
        self.concurrent_runs = 2 if self.device == "cpu" else 1

    def matte(self, picture: Image.Image) -> Image.Image:
        (fused, *_sides) = self.model.run({self.input_name: matte_u2netp.preprocess(picture)})
        return matte_u2netp.postprocess(fused, picture.size)


class U2netpTorch:
    """Loads only the prepared weights (the loader has checked the manifest); never the ONNX file."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        import torch
        from safetensors.torch import load_file

        from craftai_models.u2netp import WEIGHTS, U2NetP

        assert files.prepared is not None
        self._torch = torch
        self.device = device
        module = U2NetP()
        module.load_state_dict(load_file(str(files.prepared / WEIGHTS)), strict=True)
        self.module = module.eval().to(device)

    def matte_batch(self, pictures: Sequence[Image.Image]) -> list[Image.Image]:
        """Several pictures in one forward (all are 320² for the network)."""
        torch = self._torch
        x = torch.from_numpy(np.concatenate([matte_u2netp.preprocess(p) for p in pictures])).to(self.device)
        with torch.inference_mode():
            fused = self.module(x)[0].float().cpu().numpy()
        return [matte_u2netp.postprocess(fused[i : i + 1], p.size) for i, p in enumerate(pictures)]

    def matte(self, picture: Image.Image) -> Image.Image:
        torch = self._torch
        x = torch.from_numpy(matte_u2netp.preprocess(picture)).to(self.device)
        with torch.inference_mode():
            fused = self.module(x)[0]
        return matte_u2netp.postprocess(fused.float().cpu().numpy(), picture.size)
