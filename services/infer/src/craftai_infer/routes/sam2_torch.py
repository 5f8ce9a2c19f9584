"""SAM 2 / 2.1 hiera tiny on torch: the image path written in this project (craftai_models.sam2),
weights from the prepared folder, the same answers as the onnxruntime route with everything
after decoding on the device (craftai_infer.pipelines.segment_sam_torch).

The picture is decoded on the CPU and copied once to the device (a JPEG is decoded on the GPU
itself: engines.nvjpeg); embeddings stay on the device,
where a session keeps them. On a GPU the encoder (per batch size) and the decoder (per batch size
and number of prompt points) replay CUDA graphs captured at load for the common shapes; a decoder
batch is padded to the next power of two there (prompts of a batch never see each other), so that
a few graphs serve every number of prompts. Prompts on one picture share its embedding (batch 1,
broadcast by the decoder) rather than a copy each: the automatic mask generator's batches of
points (GRID) and a call's several objects cost one embedding, not one per prompt.

A prompt with `single_mask_like_meta` is answered by the network's `decode_single` (Meta's
single-mask rule, on the device) instead of the three multimask outputs; its graphs are captured
on first use.

Precision: the encoder runs under the route's GPU precision (fp16 unless CRAFTAI_GPU_PRECISION
says otherwise); so does the decoder in the automatic mask generator's batches, where it is most
of the time in fp32 and its answers are filtered and de-duplicated rather than answered one by
one. Prompts (clicks, boxes) are always decoded in fp32, the onnxruntime route's answers.
docs/PERFORMANCE.md has the measured agreement.

Those grid batches also run compiled by torch.compile (CRAFTAI_GPU_COMPILE, on by default;
engines.compiled), in calls of GRID_BATCH points (a shorter one padded) so that one compiled
shape serves every points_per_batch and every last, shorter batch: fused, the decoder's layer
norms, GELUs and casts no longer each read and write the batch's [64, 4096, 256] activations
(docs/PERFORMANCE.md, "The decoder compiled"). The multimask one is compiled at load; Meta's
one-mask grid on first use.

The grid's batches themselves (two steps, several batches back to back, the one-mask grid) are
run by craftai_infer.pipelines.mask_generator.torch_batches with this runner's networks.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from craftai_infer.engines.compiled import Compiled
from craftai_infer.engines.cuda_graphs import GraphCache
from craftai_infer.engines.staging import HostStaging
from craftai_infer.pipelines.mask_cleanup import NO_CLEANUP, Cleanup
from craftai_infer.pipelines.mask_generator import Candidates, Everything
from craftai_infer.pipelines.mask_generator.torch_batches import GRID_WINDOW, TorchGrid
from craftai_infer.pipelines.picture import Picture
from craftai_infer.pipelines.segment_sam import (
    SamMasks,
    SamPrompt,
    check_picture,
    encode_prompt,
    prompt_points,
)
from craftai_infer.pipelines.segment_sam_torch import TorchSamEmbedding, answer, network_input
from craftai_infer.routes import (
    DECODE,
    ENCODE,
    GRID,
    Capabilities,
    DecodeRequest,
    GridRequest,
    RouteFiles,
    SegmentRoute,
    Step,
)
from craftai_models.sam2.contract import WEIGHTS
from craftai_models.sam2.model import Sam2ImageModel, build_sam21_tiny

DECODER_FEEDS = ("point_coords", "point_labels", "mask_input", "has_mask_input")
# The encoder's (and the grid decoder's) autocast on the GPU unless CRAFTAI_GPU_PRECISION says
# otherwise; prompts are decoded in fp32. docs/PERFORMANCE.md has the tolerance kept against the
# fp32 route and the timings.
GPU_ENCODER_DEFAULT = "fp16"
PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
# The compiled grid decoder's one batch size: a grid batch is decoded in calls of this many points
# (a shorter one padded), so that no other shape is ever compiled (Meta's default points_per_batch).
GRID_BATCH = 64
# On a GPU the route runs one call at a time and a click's decoder call waits for the one in flight:
# a grid call takes at most this many of the generator's batches waiting (of any callers), so that
# the wait stays short (docs/PERFORMANCE.md, "Serving ... on a GPU").
GRID_CALL = 2
# The encoder's batch sizes captured as CUDA graphs at load (the loader's default max_batch): a
# capture synchronises the device, which under load every caller would wait for.
ENCODER_BATCHES = tuple(range(1, 9))


def load_network(weights: Path, device: str) -> Sam2ImageModel:
    from safetensors.torch import load_file

    net = build_sam21_tiny(load_file(str(weights)))
    return net.to(device).eval()


NetworkFn = Callable[..., Sequence[torch.Tensor]]


class SamTorchRunner:
    """The converted network on one device; `encoder_autocast` None runs the encoder in fp32, and
    `grid_autocast` None the automatic mask generator's decoder batches.

    On a CUDA device the encoder and the decoder run as CUDA graphs unless `graphs` is False;
    `warm_up()` captures the common shapes at load. `compile_grid`: the grid's reduced-precision
    decoder batches through torch.compile (CUDA with `grid_autocast` only), in calls of GRID_BATCH
    points; `grid_call`: calls of that many points uncompiled (default: a batch in one call).
    """

    def __init__(
        self,
        net: Sam2ImageModel,
        device: str,
        *,
        encoder_autocast: torch.dtype | None = None,
        grid_autocast: torch.dtype | None = None,
        graphs: bool = True,
        compile_grid: bool = False,
        grid_call: int | None = None,
    ) -> None:
        self.net = net
        self.device = torch.device(device)
        self.encoder_autocast = encoder_autocast
        self.grid_autocast = grid_autocast if self.device.type == "cuda" else None
        self.compile_grid = compile_grid and self.grid_autocast is not None
        # points a grid call decodes at once (the last call padded): one compiled shape when compiled
        self.grid_call = GRID_BATCH if self.compile_grid else grid_call
        self.compiled: list[Compiled] = []  # the grid's compiled decoders (each says if it fell back)
        self._staging = HostStaging(self.device)
        self._encoder_graphs: GraphCache | None = None
        # (Meta's one-mask answer, autocast) -> the decoder and its graphs: the prompts' fp32 ones,
        # and the one-mask grid's in `grid_autocast` where set (without, it shares the prompts').
        self._decoders: dict[tuple[bool, bool], _Network] = {}
        # The multimask grid in two steps (`grid`), in `grid_autocast` where set.
        self._attend: _Network
        self._predict_masks: _Network
        on_graphs = graphs and self.device.type == "cuda"
        if on_graphs:
            # one graph per batch size up to the default max_batch: none evicted and recaptured under load
            self._encoder_graphs = GraphCache(self._encode_network, self.device, capacity=len(ENCODER_BATCHES))

        def network(fn: Callable[..., Any], name: str, capacity: int, *, reduced: bool, keep: int = 0) -> _Network:
            """`fn` as the route runs it: in the grid's autocast when `reduced` (its outputs in fp32
            but for the first `keep`, which the next step reads), compiled where asked, replayed
            as CUDA graphs on a GPU."""
            if reduced and self.grid_autocast is not None:
                if self.compile_grid:
                    # the network's own method, compiled: torch.compile caches by code object, and
                    # one wrapper's code around several methods answered the first one compiled
                    compiled = Compiled(fn, name)
                    self.compiled.append(compiled)
                    fn = compiled
                run = _autocast(fn, self.device, self.grid_autocast, keep=keep)
            else:
                run = _as_tuple(fn)
            return _Network(run, GraphCache(run, self.device, capacity=capacity) if on_graphs else None)

        self._decoders[False, False] = network(net.decode, "the SAM decoder", 32, reduced=False)
        self._decoders[True, False] = network(net.decode_single, "the SAM decoder (one mask)", 16, reduced=False)
        if self.grid_autocast is not None:
            self._decoders[True, True] = network(net.decode_single, "the SAM grid decoder (one mask)", 16, reduced=True)
        self._attend = network(net.attend, "the SAM grid decoder's transformer", 16, reduced=True, keep=2)
        self._predict_masks = network(net.predict_masks, "the SAM grid's masks", 16, reduced=True)
        self._grid = TorchGrid(
            self.device,
            attend=self._attend.run,
            predict_masks=self._predict_masks.run,
            decode_one_mask=self._grid_decode_one_mask,
            replayed=self._attend.graphs is not None,
            call=self.grid_call,
            size=self._grid_size,
        )

    def _encode_network(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        autocast = (
            torch.autocast(self.device.type, dtype=self.encoder_autocast)
            if self.encoder_autocast is not None
            else contextlib.nullcontext()
        )
        with autocast:
            feats_0, feats_1, embed = self.net.encode(x)
        return feats_0.float(), feats_1.float(), embed.float()

    def warm_up(self, step: Step | None = None) -> None:
        """Capture the shapes every picture and the first clicks use (no-op without graphs)."""
        if self._encoder_graphs is None:
            return
        say = step or (lambda _message: None)
        picture = np.zeros((64, 64, 3), np.uint8)
        for size in ENCODER_BATCHES:
            say(f"capturing the encoder for {size} picture(s)")
            embedding = self.encode_batch([picture] * size)[0]
        for points in (1, 2, 3, 4):
            say(f"capturing the decoder for {points} point(s)")
            self.decode(embedding, SamPrompt(points=[(8.0, 8.0)] * points, labels=[1] * points))
        every_mask = Everything(pred_iou_thresh=0.0, stability_score_thresh=0.0)  # every mask passes
        if self.compile_grid:  # both steps of the multimask grid, at their one compiled size
            say("compiling the automatic mask generator's decoder (the first load on a machine: about a minute)")
            self.grid(embedding, np.full((1, 2), 8.0, np.float32), every_mask)
            return
        # both steps of the multimask grid at each bucket a grid call meets: `attend` up to a batch
        # of GRID_BATCH points, `predict_masks` up to the kept points of GRID_CALL batches of one picture
        say("capturing the automatic mask generator's decoder")
        for k in range(GRID_BATCH.bit_length()):
            self.grid(embedding, np.full((1 << k, 2), 8.0, np.float32), every_mask)
        batch = (embedding, np.full((GRID_BATCH, 2), 8.0, np.float32), every_mask)
        for calls in range(2, GRID_CALL + 1):
            self.grid_batches([batch] * calls)

    def preprocess(self, picture: npt.NDArray[Any]) -> torch.Tensor:
        """RGB uint8 HxWx3 -> [1, 3, 1024, 1024] normalised, on the device (one host-to-device copy)."""
        return network_input(self._staging.upload(check_picture(picture)))

    def encode_batch(self, pictures: Sequence[npt.NDArray[Any]]) -> list[TorchSamEmbedding]:
        """The encoder once for several pictures (one batch on the device)."""
        with torch.inference_mode():
            x = torch.cat([self.preprocess(p) for p in pictures])
            if self._encoder_graphs is not None:
                outputs = self._encoder_graphs.run(len(pictures), [x])
                feats_0, feats_1, embed = (t.clone() for t in outputs)  # kept by sessions past the next replay
            else:
                feats_0, feats_1, embed = self._encode_network(x)
        return [
            TorchSamEmbedding(
                feats_0[i : i + 1], feats_1[i : i + 1], embed[i : i + 1], int(p.shape[0]), int(p.shape[1])
            )
            for i, p in enumerate(pictures)
        ]

    def encode(self, picture: npt.NDArray[Any]) -> TorchSamEmbedding:
        return self.encode_batch([picture])[0]

    def _decode_network(
        self, items: Sequence[tuple[TorchSamEmbedding, SamPrompt]], *, single: bool = False
    ) -> tuple[list[TorchSamEmbedding], torch.Tensor, torch.Tensor]:
        """The decoder once for prompts with as many points each (the route groups them so), on
        one picture or several: low-res logits [N, 3, 256, 256] and IoUs [N, 3], on the device
        ([N, 1, ...] and [N, 1], Meta's single-mask answer, when `single`)."""
        d = self.device
        n = len(items)
        embeddings = [e.to(d) for e, _ in items]
        shared = all(e is items[0][0] for e, _ in items)
        if shared:
            embeddings = [embeddings[0]] * n
        feeds = [
            encode_prompt(p, e.picture_height, e.picture_width) for e, (_, p) in zip(embeddings, items, strict=True)
        ]
        size = self._batch_size(n)
        pad = [feeds[-1]] * (size - n)  # copies of the last prompt, answers dropped
        with torch.inference_mode():
            prompt_feeds = [
                torch.from_numpy(np.concatenate([f[k] for f in [*feeds, *pad]])).to(d, non_blocking=True)
                for k in DECODER_FEEDS
            ]
        masks, ious = self._decoder(embeddings, shared, size, prompt_feeds, single)
        return embeddings, masks[:n], ious[:n]

    def _batch_size(self, n: int) -> int:
        return _bucket(n) if self._encoder_graphs is not None else n

    def _decoder(
        self,
        embeddings: list[TorchSamEmbedding],
        shared: bool,
        size: int,
        prompt_feeds: list[torch.Tensor],
        single: bool,
        *,
        grid: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder (or its graph) on `size` prompts' feeds (DECODER_FEEDS, on the device) over
        their pictures' embeddings (one, broadcast, when `shared`); `grid`: a batch of the automatic
        mask generator's points (in `grid_autocast`, where set)."""
        n = len(embeddings)

        def stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
            if shared:
                return tensors[0]  # batch 1: the decoder broadcasts it over the prompts
            tensors = tensors + [tensors[-1]] * (size - n)
            return tensors[0] if len(tensors) == 1 else torch.cat(tensors)  # no copy for one prompt

        with torch.inference_mode():
            inputs = [
                stacked([e.image_embed for e in embeddings]),
                stacked([e.high_res_feats_0 for e in embeddings]),
                stacked([e.high_res_feats_1 for e in embeddings]),
                *prompt_feeds,
            ]
            decoder = self._decoders[single, grid and self.grid_autocast is not None]
            masks, ious = decoder.run((size, inputs[3].shape[1], shared and size > 1), inputs)
        return masks, ious

    def decode_raw(self, embedding: TorchSamEmbedding, prompt: SamPrompt) -> tuple[torch.Tensor, torch.Tensor]:
        """low-res logits [3, 256, 256] and IoUs [3], on the device."""
        _, masks, ious = self._decode_network([(embedding, prompt)])
        return masks[0], ious[0]

    def decode(
        self,
        embedding: TorchSamEmbedding,
        prompt: SamPrompt,
        *,
        all_masks: bool = False,
        cleanup: Cleanup = NO_CLEANUP,
    ) -> SamMasks:
        return self.decode_batch([(embedding, prompt, all_masks)], [cleanup])[0]

    def decode_batch(
        self,
        items: Sequence[tuple[TorchSamEmbedding, SamPrompt, bool]],
        cleanups: Sequence[Cleanup] | None = None,
    ) -> list[SamMasks]:
        """Prompts on several pictures (or one) in one decoder call (two when some ask for Meta's
        single mask and some do not); every prompt must have as many points (`prompt_points`).
        `cleanups`: Meta's clean-up per item (default: none)."""
        cleanups = cleanups or [NO_CLEANUP] * len(items)
        answers: dict[int, SamMasks] = {}
        for single in (False, True):
            part = [i for i, (_, p, _) in enumerate(items) if p.single_mask_like_meta == single]
            if not part:
                continue
            embeddings, masks, ious = self._decode_network([items[i][:2] for i in part], single=single)
            for k, (i, e) in enumerate(zip(part, embeddings, strict=True)):
                answers[i] = answer(
                    masks[k], ious[k], e.picture_height, e.picture_width, all_masks=items[i][2], cleanup=cleanups[i]
                )
        return [answers[i] for i in range(len(items))]

    def grid(self, embedding: TorchSamEmbedding, points: npt.NDArray[np.float32], settings: Everything) -> Candidates:
        """One batch of the automatic mask generator (`grid_batches` of one)."""
        return self.grid_batches([(embedding, points, settings)])[0]

    def grid_batches(
        self, batches: Sequence[tuple[TorchSamEmbedding, npt.NDArray[np.float32], Everything]]
    ) -> list[Candidates]:
        """Batches of the automatic mask generator (one picture each, any pictures), their filters
        on the device (craftai_infer.pipelines.mask_generator.torch_batches). Compiled, in calls of
        GRID_BATCH points, so that no other shape is ever compiled."""
        return self._grid.run(batches)

    def _grid_size(self, n: int) -> int:
        """A grid call's batch (n <= grid_call): GRID_BATCH when compiled, else the graphs' bucket."""
        return GRID_BATCH if self.compile_grid else self._batch_size(n)

    def _grid_decode_one_mask(
        self, e: TorchSamEmbedding, n: int, size: int, prompt_feeds: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Meta's one mask for `n` grid points on one picture, their feeds padded to `size`: the
        one-mask grid decoder (in `grid_autocast`, where set)."""
        return self._decoder([e] * n, True, size, prompt_feeds, True, grid=True)


@dataclass(frozen=True)
class _Network:
    """A network function as the route runs it, and its CUDA graphs on a GPU (None elsewhere)."""

    fn: NetworkFn
    graphs: GraphCache | None

    def run(self, key: Hashable, inputs: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        """Its outputs: the graph's own tensors (overwritten by the next replay) on a GPU."""
        return self.graphs.run(key, inputs) if self.graphs is not None else self.fn(*inputs)


def _as_tuple(fn: Callable[..., Any]) -> NetworkFn:
    """A network method as graphs and `_Network` take it: its outputs as a tuple (one tensor too)."""

    def outputs(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = fn(*inputs)
        return (out,) if isinstance(out, torch.Tensor) else tuple(out)

    return outputs


def _autocast(fn: Callable[..., Any], device: torch.device, dtype: torch.dtype, *, keep: int = 0) -> NetworkFn:
    """`fn` under autocast to `dtype`, its outputs back in fp32 (what the filters read) but for the
    first `keep` (what the next step reads, left as they are)."""
    as_tuple = _as_tuple(fn)

    def reduced(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.autocast(device.type, dtype=dtype):
            outputs = as_tuple(*inputs)
        return tuple(t if k < keep else t.float() for k, t in enumerate(outputs))

    return reduced


def _bucket(n: int) -> int:
    """The batch a CUDA graph is captured for: the next power of two (1, 2, 4, ...)."""
    return 1 << max(0, n - 1).bit_length()


class Sam2Torch(SegmentRoute):
    """Loads only the prepared weights (the loader checked the manifest), never the ONNX files; the
    encoder batches pictures and the decoder batches prompts (grouped by their number of points)."""

    capabilities = Capabilities(batched=frozenset({ENCODE, DECODE, GRID}), single_mask_like_meta=True)

    def __init__(self, files: RouteFiles, device: str) -> None:
        assert files.prepared is not None
        precision = GPU_ENCODER_DEFAULT if files.gpu_precision == "auto" else files.gpu_precision
        on_gpu = device.startswith("cuda")
        if on_gpu:  # the grid's batches queued GRID_WINDOW at a time, GRID_CALL of those waiting in one call
            self.capabilities = dataclasses.replace(
                self.capabilities, pinned_pictures=True, grid_ahead=GRID_WINDOW, max_batch={GRID: GRID_CALL}
            )
        autocast = PRECISIONS[precision] if on_gpu else None
        self.runner = SamTorchRunner(
            load_network(files.prepared / WEIGHTS, device),
            device,
            encoder_autocast=autocast,
            grid_autocast=autocast,
            compile_grid=files.gpu_compile,
        )
        self.device = device

    def warm_up(self, step: Step) -> None:
        self.runner.warm_up(step)

    def encode(self, pictures: Sequence[Picture]) -> list[Any]:
        return list(self.runner.encode_batch(pictures))

    def decode(self, requests: Sequence[DecodeRequest]) -> list[list[SamMasks]]:
        """Every prompt of every request, one decoder call per number of points."""
        items = [
            (k, (r.embedding, p, a), r.cleanup or NO_CLEANUP)
            for k, r in enumerate(requests)
            for p, a in zip(r.prompts, r.all_masks, strict=True)
        ]
        groups: dict[int, list[int]] = defaultdict(list)
        for index, (_, (_, prompt, _), _) in enumerate(items):
            groups[prompt_points(prompt)].append(index)
        answers: list[SamMasks | None] = [None] * len(items)
        for indices in groups.values():
            batch = self.runner.decode_batch([items[i][1] for i in indices], [items[i][2] for i in indices])
            for i, masks in zip(indices, batch, strict=True):
                answers[i] = masks
        out: list[list[SamMasks]] = [[] for _ in requests]
        for (k, _, _), answered in zip(items, answers, strict=True):
            assert answered is not None
            out[k].append(answered)
        return out

    def grid(self, requests: Sequence[GridRequest]) -> list[Candidates]:
        return self.runner.grid_batches([(r.embedding, r.points, r.settings) for r in requests])
