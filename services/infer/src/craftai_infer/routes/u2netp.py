"""u2netp for image.matte, rembg-compatible pipeline on two engines: the published ONNX through
onnxruntime, and the network written in this project (torch) with weights from the prepared folder."""

from __future__ import annotations

import os
import queue
from collections.abc import Sequence

import numpy as np
from PIL import Image

from craftai_infer.engines.onnxruntime import OnnxModel
from craftai_infer.pipelines import matte_u2netp
from craftai_infer.routes import RouteFiles

WEIGHTS = "u2netp.safetensors"  # written by craftai_prepare.converters.u2netp


def cpu_sessions(cores: int) -> int:
    """How many sessions share the CPU: one per four cores (up to four). A small network such as u2netp
    keeps only a few cores busy inside one run, so concurrent requests go faster on sessions of their
    own than queued on one session spread over every core."""
    return max(1, min(4, cores // 4))


class U2netpOnnx:
    """On the CPU, `parallel` sessions (each with its share of the cores) answer concurrent requests at
    once; the results are the same, as the threads split the work, not the sums."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        path = files.role("network")
        first = OnnxModel(path, device, files.cpu_threads)
        self.device = first.device
        self.input_name = first.input_names[0]
        cores = files.cpu_threads or os.cpu_count() or 1
        self.parallel = 1 if self.device != "cpu" else cpu_sessions(cores)
        if self.parallel > 1:
            share = max(1, cores // self.parallel)
            models = [OnnxModel(path, device, share, spinning=False) for _ in range(self.parallel)]
        else:
            models = [first]
        self._free: queue.SimpleQueue[OnnxModel] = queue.SimpleQueue()
        for model in models:
            self._free.put(model)

    def matte(self, picture: Image.Image) -> Image.Image:
        x = matte_u2netp.preprocess(picture)
        model = self._free.get()
        try:
            (fused, *_sides) = model.run({self.input_name: x})
        finally:
            self._free.put(model)
        return matte_u2netp.postprocess(fused, picture.size)


class U2netpTorch:
    """Loads only the prepared weights (the loader has checked the manifest); never the ONNX file."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        import torch
        from safetensors.torch import load_file

        from craftai_infer.models.u2netp import U2NetP

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
