"""SAM 2 / 2.1 hiera tiny for image.segment: the published encoder.onnx and decoder.onnx
(samexporter contract) through onnxruntime, CUDA provider when the GPU is the chosen device."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from craftai_infer.pipelines.segment_sam import SamEmbedding, SamMasks, SamOnnxRunner, SamPrompt
from craftai_infer.routes import ModelRefusedError, RouteFiles


class Sam2Onnx:
    """Both graphs of one route; files by role "encoder" and "decoder" (already hash-checked)."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        try:
            self.runner = SamOnnxRunner(
                files.role("encoder"),
                files.role("decoder"),
                intra_op_threads=files.cpu_threads,
                use_gpu=device.startswith("cuda"),
            )
        except ValueError as exc:  # the files load but are not the samexporter contract
            raise ModelRefusedError(str(exc)) from exc
        except Exception as exc:  # onnxruntime refuses the bytes (not an ONNX graph it can run)
            if type(exc).__module__.startswith("onnxruntime"):
                raise ModelRefusedError(f"onnxruntime cannot load them: {exc}") from exc
            raise
        self.device = "cuda:0" if self.runner.providers[0] == "CUDAExecutionProvider" else "cpu"

    def encode(self, picture: npt.NDArray[np.uint8]) -> SamEmbedding:
        return self.runner.encode(picture)

    def decode(self, embedding: Any, prompt: SamPrompt, *, all_masks: bool = False) -> SamMasks:
        return self.runner.decode(embedding, prompt, all_masks=all_masks)
