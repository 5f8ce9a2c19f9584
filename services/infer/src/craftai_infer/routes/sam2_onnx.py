"""SAM 2 / 2.1 hiera tiny on onnxruntime: the published encoder.onnx and decoder.onnx (samexporter
contract) from the route's prepared folder, CUDA provider when the GPU is the chosen device, with the
numpy pre- and post-processing of craftai_infer.pipelines.segment_sam (Meta's predictor's semantics).

The encoder is the published file; the decoder is the published graph with two more outputs, the
single-mask token 0 it computes and slices off (craftai_prepare's sam21_decoder converter, checked
bit for bit against the published graph when it was made): so this route answers Meta's single
mask (`single_mask_like_meta`, segment everything with multimask_output false) as the torch route
does. A decoder without those outputs (the published one as it is) answers the three multimask
outputs only, and the route says so in its capabilities."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from craftai_infer.pipelines import mask_generator
from craftai_infer.pipelines.mask_cleanup import NO_CLEANUP, Cleanup
from craftai_infer.pipelines.mask_generator import Candidates, Everything
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.segment_sam import (
    F32,
    SamMasks,
    SamPrompt,
    encode_prompt,
    postprocess,
    preprocess,
    single_mask_by_stability,
)
from craftai_infer.routes import (
    Capabilities,
    DecodeRequest,
    GridRequest,
    ModelRefusedError,
    RouteFiles,
    SegmentRoute,
    Step,
)
from craftai_infer.scheduling import made_at_lower_priority
from craftai_models.onnx_sessions import open_session, session_device
from craftai_models.sam2.contract import (
    DECODER_INPUTS,
    DECODER_OUTPUTS,
    DECODER_SINGLE_OUTPUTS,
    ENCODER_INPUTS,
    ENCODER_OUTPUTS,
    PREPARED_DECODER,
    PREPARED_ENCODER,
)


@dataclass(frozen=True, eq=False)
class SamEmbedding:
    """What the encoder computes once per picture (kept in a session so later clicks skip it)."""

    high_res_feats_0: F32  # [1, 32, 256, 256]
    high_res_feats_1: F32  # [1, 64, 128, 128]
    image_embed: F32  # [1, 256, 64, 64]
    picture_height: int
    picture_width: int

    @property
    def nbytes(self) -> int:
        """Memory held, for the session store's budget."""
        return int(self.high_res_feats_0.nbytes + self.high_res_feats_1.nbytes + self.image_embed.nbytes)


class SamOnnxRunner:
    """Two onnxruntime sessions (encoder.onnx, decoder.onnx) with the samexporter SAM 2 contract;
    `single_mask` where the decoder also answers token 0 (`DECODER_SINGLE_OUTPUTS`).

    Thread-safe as onnxruntime sessions are: run() may be called from several threads at once.
    With `bulk_niceness` (the CPU), the encoder and a second decoder session for the automatic
    mask generator's grid (bulk work) run their thread pools at that lower priority, so that a
    click's decoder calls, on a session of their own, are not queued in a pool busy with a grid.
    """

    def __init__(
        self,
        encoder_path: Path | str,
        decoder_path: Path | str,
        *,
        intra_op_threads: int = 0,
        use_gpu: bool = True,
        spin: bool = True,
        bulk_niceness: int = 0,
    ) -> None:
        device = "cuda" if use_gpu else "cpu"

        def opened(path: Path | str) -> Any:
            return open_session(path, device, intra_op_threads=intra_op_threads, spin=spin)

        self.encoder = made_at_lower_priority(bulk_niceness, lambda: opened(encoder_path))
        self.decoder = opened(decoder_path)
        self.grid_decoder = (
            made_at_lower_priority(bulk_niceness, lambda: opened(decoder_path)) if bulk_niceness else self.decoder
        )
        _check_contract("encoder", self.encoder, ENCODER_INPUTS, (ENCODER_OUTPUTS,))
        _check_contract(
            "decoder", self.decoder, DECODER_INPUTS, (DECODER_OUTPUTS, DECODER_OUTPUTS + DECODER_SINGLE_OUTPUTS)
        )
        self.single_mask = tuple(o.name for o in self.decoder.get_outputs())[2:] == DECODER_SINGLE_OUTPUTS

    @property
    def providers(self) -> list[str]:
        """The providers the sessions really use (CUDA may have been refused at load)."""
        return list(self.encoder.get_providers())

    @property
    def device(self) -> str:
        return session_device(self.encoder)

    def encode(self, picture: npt.NDArray[Any]) -> SamEmbedding:
        """Run the encoder on an RGB uint8 HxWx3 picture (the expensive step, once per picture)."""
        feed = {"image": preprocess(picture)}
        feats_0, feats_1, embed = self.encoder.run(list(ENCODER_OUTPUTS), feed)
        return SamEmbedding(feats_0, feats_1, embed, int(picture.shape[0]), int(picture.shape[1]))

    def decode_raw(self, embedding: SamEmbedding, prompt: SamPrompt, *, grid: bool = False) -> tuple[F32, F32]:
        """The decoder's outputs for one prompt: low-res logits [3,256,256] and IoUs [3]; with
        `single_mask_like_meta`, Meta's one answer [1,256,256] and [1] (token 0 or the best of three).
        `grid`: a point of the automatic mask generator, on its own session."""
        feed = {
            "image_embed": embedding.image_embed,
            "high_res_feats_0": embedding.high_res_feats_0,
            "high_res_feats_1": embedding.high_res_feats_1,
            **encode_prompt(prompt, embedding.picture_height, embedding.picture_width),
        }
        decoder = self.grid_decoder if grid else self.decoder
        if not prompt.single_mask_like_meta:
            masks, ious = decoder.run(list(DECODER_OUTPUTS), feed)
            return np.asarray(masks[0], dtype=np.float32), np.asarray(ious[0], dtype=np.float32)
        if not self.single_mask:
            raise ValueError("this decoder graph does not answer Meta's single-mask token (prepare the route)")
        masks, ious, single, single_iou = decoder.run([*DECODER_OUTPUTS, *DECODER_SINGLE_OUTPUTS], feed)
        return single_mask_by_stability(single[0], single_iou[0], masks[0], ious[0])

    def decode(
        self, embedding: SamEmbedding, prompt: SamPrompt, *, all_masks: bool = False, cleanup: Cleanup = NO_CLEANUP
    ) -> SamMasks:
        """Masks at the picture's size, IoUs and low-res logits for one prompt, best first."""
        low_res, ious = self.decode_raw(embedding, prompt)
        h, w = embedding.picture_height, embedding.picture_width
        return postprocess(low_res, ious, h, w, all_masks=all_masks, cleanup=cleanup)

    def grid(self, embedding: SamEmbedding, points: F32, settings: Everything) -> Candidates:
        """One batch of the automatic mask generator: the published decoder takes one prompt set a
        call, so one call per point (Meta's single mask each with multimask_output false), then
        the filters on the host."""
        single = not settings.multimask_output
        decoded = [
            self.decode_raw(
                embedding, SamPrompt(points=[tuple(p)], labels=[1], single_mask_like_meta=single), grid=True
            )
            for p in points
        ]
        low_res = np.stack([d[0] for d in decoded])
        ious = np.stack([d[1] for d in decoded])
        h, w = embedding.picture_height, embedding.picture_width
        return mask_generator.batch_candidates(low_res, ious, points, h, w, settings=settings)


def _check_contract(part: str, session: Any, inputs: tuple[str, ...], outputs: tuple[tuple[str, ...], ...]) -> None:
    """The session's inputs are `inputs` and its outputs one of `outputs`, else ValueError in words."""
    got_in = tuple(i.name for i in session.get_inputs())
    got_out = tuple(o.name for o in session.get_outputs())
    if got_in != inputs or got_out not in outputs:
        raise ValueError(
            f"the {part} file is not a SAM 2 samexporter {part}: inputs {list(got_in)},"
            f" outputs {list(got_out)}; expected {list(inputs)} -> {' or '.join(str(list(o)) for o in outputs)}"
        )


class Sam2Onnx(SegmentRoute):
    """Both graphs of one route, from its prepared folder (the loader hashed them against its
    manifest). The graphs take one picture and one prompt set: nothing is batched."""

    capabilities = Capabilities()

    def __init__(self, files: RouteFiles, device: str) -> None:
        assert files.prepared is not None
        try:
            self.runner = SamOnnxRunner(
                files.prepared / PREPARED_ENCODER,
                files.prepared / PREPARED_DECODER,
                intra_op_threads=files.cpu_threads,
                use_gpu=device.startswith("cuda"),
                spin=files.cpu_spin,
                bulk_niceness=0 if device.startswith("cuda") else files.bulk_niceness,
            )
        except ValueError as exc:  # the files load but are not the samexporter contract
            raise ModelRefusedError(str(exc)) from exc
        except Exception as exc:  # onnxruntime refuses the bytes (not an ONNX graph it can run)
            if type(exc).__module__.startswith("onnxruntime"):
                raise ModelRefusedError(f"onnxruntime cannot load them: {exc}") from exc
            raise
        self.device = self.runner.device
        self.capabilities = Capabilities(single_mask_like_meta=self.runner.single_mask)

    def warm_up(self, step: Step) -> None:
        """Nothing to capture: onnxruntime plans its graphs when the session is made."""

    def encode(self, pictures: Sequence[Picture]) -> list[Any]:
        return [self.runner.encode(picture) for picture in pictures]

    def decode(self, requests: Sequence[DecodeRequest]) -> list[list[SamMasks]]:
        return [
            [
                self.runner.decode(r.embedding, p, all_masks=a, cleanup=r.cleanup or NO_CLEANUP)
                for p, a in zip(r.prompts, r.all_masks, strict=True)
            ]
            for r in requests
        ]

    def grid(self, requests: Sequence[GridRequest]) -> list[Candidates]:
        return [self.runner.grid(r.embedding, r.points, r.settings) for r in requests]
