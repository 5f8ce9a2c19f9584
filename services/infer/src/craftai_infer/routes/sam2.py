"""SAM 2 / 2.1 hiera tiny for image.segment on two engines: the published encoder.onnx and
decoder.onnx (samexporter contract) through onnxruntime, CUDA provider when the GPU is the chosen
device; and the image path written in this project (torch), weights from the prepared folder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from craftai_infer.pipelines.segment_sam import SamEmbedding, SamMasks, SamOnnxRunner, SamPrompt
from craftai_infer.routes import ModelRefusedError, RouteFiles
from craftai_models.sam2.contract import WEIGHTS


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


# The encoder's autocast on the GPU unless CRAFTAI_GPU_PRECISION says otherwise; the decoder runs
# fp32. docs/PERFORMANCE.md has the tolerance kept against the fp32 route and the timings.
GPU_ENCODER_DEFAULT = "fp16"


class Sam2Torch:
    """Loads only the prepared weights (the loader checked the manifest), never the ONNX files.
    On a GPU the encoder and decoder replay CUDA graphs captured by `warm_up` at load."""

    def __init__(self, files: RouteFiles, device: str) -> None:
        import torch

        from craftai_infer.pipelines.segment_sam_torch import SamTorchRunner, load_network

        assert files.prepared is not None
        precisions = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
        precision = GPU_ENCODER_DEFAULT if files.gpu_precision == "auto" else files.gpu_precision
        on_gpu = device.startswith("cuda")
        self.runner = SamTorchRunner(
            load_network(files.prepared / WEIGHTS, device),
            device,
            encoder_autocast=precisions[precision] if on_gpu else None,
        )
        self.device = device

    def warm_up(self, step: Callable[[str], None]) -> None:
        self.runner.warm_up(step)

    def encode(self, picture: npt.NDArray[np.uint8]) -> Any:
        return self.runner.encode(picture)

    def encode_batch(self, pictures: Sequence[npt.NDArray[np.uint8]]) -> list[Any]:
        return list(self.runner.encode_batch(pictures))

    def decode(self, embedding: Any, prompt: SamPrompt, *, all_masks: bool = False) -> SamMasks:
        return self.runner.decode(embedding, prompt, all_masks=all_masks)

    def decode_batch(self, items: Sequence[tuple[Any, SamPrompt, bool]]) -> list[SamMasks]:
        return self.runner.decode_batch(items)
