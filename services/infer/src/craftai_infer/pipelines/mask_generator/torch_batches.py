"""Segment everything on torch: how the torch route decodes the generator's batches of points
(steps 2-3; the route, routes/sam2_torch.py, gives its networks and how it calls them).

Meta's three masks a point run in two steps: the transformer and the IoU head for every point
(the network's `attend`), then the masks' upscaling only for the points with a mask above
pred_iou_thresh (`predict_masks`; where few pass, most of the decoder's upscaling is never done),
the filters after it on the device (torch_steps.py). The route batches GRID: the batches that
waited for its worker come in one call (`TorchGrid.run`), their first steps run back to back
(GRID_WINDOW of them launched before one read-back of their IoUs, so that the device does not
wait for the host between batches), and the kept points of one picture are upscaled together.
Where the first step is most of a batch's time: docs/PERFORMANCE.md, "Segment everything against
Meta's generator".

Meta's single mask a point (the network's `decode_single`) when multimask_output is false: its
choice needs token 0's mask, so every point's masks are made, in one step.

A route that compiles its grid networks calls them with one batch size (`size`), a batch decoded
in calls of at most `call` points, the last one padded with copies of its last point: no other
shape is ever compiled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from craftai_infer.pipelines.mask_generator import torch_steps
from craftai_infer.pipelines.mask_generator.amg import Candidates, batches
from craftai_infer.pipelines.mask_generator.generator import Everything, iou_kept
from craftai_infer.pipelines.segment_sam import grid_point_feeds
from craftai_infer.pipelines.segment_sam_torch import TorchSamEmbedding
from craftai_models.sam2.contract import LOW_RES
from craftai_models.sam2.mask_decoder import NUM_MULTIMASK_OUTPUTS as NUM_MULTIMASK

# The grid's `attend` calls launched before one read-back of their IoUs: the device runs them back
# to back rather than waiting for the host after each; each holds its cells until then (64 points:
# 134 MB in fp16).
GRID_WINDOW = 8

# A network as the route runs it: (its graph's key, its inputs) -> its outputs, which may be a
# CUDA graph's own tensors, overwritten by its next replay (`replayed`).
Run = Callable[[Hashable, Sequence[torch.Tensor]], Sequence[torch.Tensor]]
# Meta's one mask for grid points on one picture: (embedding, points, batch size, the prompt feeds
# padded to it) -> logits [size, 1, 256, 256] and IoUs [size, 1] on the device.
DecodeOneMask = Callable[[TorchSamEmbedding, int, int, list[torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True, eq=False)
class TorchGrid:
    """The generator's batches on one device, with the route's networks: `attend` (cells
    [N, 4096, 256], 32-vectors [N, 3, 32] and IoUs [N, 3] for N points), `predict_masks` (logits
    [P, 3, 256, 256] from gathered cells and 32-vectors), `decode_one_mask`; `replayed` when their
    outputs are CUDA graphs' own; `call`, the points a call decodes at most (None: a batch in one
    call); `size`, the batch a call of n points is padded to."""

    device: torch.device
    attend: Run
    predict_masks: Run
    decode_one_mask: DecodeOneMask
    replayed: bool
    call: int | None
    size: Callable[[int], int]

    def run(self, batches: Sequence[tuple[TorchSamEmbedding, npt.NDArray[np.float32], Everything]]) -> list[Candidates]:
        """Batches of the automatic mask generator (one picture each, any pictures) -> the masks of
        each that pass the filters (two steps, or Meta's single mask: the module says how)."""
        answers: dict[int, Candidates] = {}
        two_steps: list[_GridBatch] = []
        with torch.inference_mode():
            for i, (embedding, points, settings) in enumerate(batches):
                e = embedding.to(self.device)
                if settings.multimask_output:
                    two_steps.append(_GridBatch(i, e, points, settings))
                else:
                    answers[i] = self._one_mask(e, points, settings)
            if two_steps:
                self._attend_all(two_steps)
                self._predict_kept_masks(two_steps)
                for b in two_steps:
                    answers[b.index] = b.candidates()
        return [answers[i] for i in range(len(batches))]

    def _step(self, n: int) -> int:
        return self.call or n

    def _attend_all(self, batches: Sequence[_GridBatch]) -> None:
        """`attend` on every point of `batches`, GRID_WINDOW calls at a time, then one read-back of
        their IoUs; the cells and 32-vectors of the points with a mask above the threshold kept
        (copies: a graph's outputs are overwritten by its next replay)."""
        calls = [(b, start) for b in batches for start in range(0, len(b.points), self._step(len(b.points)))]
        copied = self.replayed
        for w in range(0, len(calls), GRID_WINDOW):
            window = calls[w : w + GRID_WINDOW]
            attended = []
            for b, start in window:
                outputs = self._attend_call(b.e, b.points[start : start + self._step(len(b.points))])
                attended.append(tuple(t.clone() for t in outputs) if copied and len(window) > 1 else outputs)
            scores = torch.cat([ious.reshape(-1) for _, _, ious in attended]).float().cpu().numpy()
            offsets = np.cumsum([0] + [ious.numel() for _, _, ious in attended])
            for k, ((b, start), (cells, hyper, _)) in enumerate(zip(window, attended, strict=True)):
                b.take(start, scores[offsets[k] : offsets[k + 1]], cells, hyper)

    def _predict_kept_masks(self, batches: Sequence[_GridBatch]) -> None:
        """`predict_masks` on the kept points, those of one picture in the same calls."""
        by_picture: dict[int, list[_GridBatch]] = defaultdict(list)
        for b in batches:
            if b.cells:
                by_picture[id(b.e)].append(b)
        for group in by_picture.values():
            cells = torch.cat([c for b in group for c in b.cells])
            hyper = torch.cat([h for b in group for h in b.hyper])
            masks = self._masks(group[0].e, cells, hyper)  # [P, 3, 256, 256]
            start = 0
            for b in group:
                b.masks = masks[start : start + len(b.rows)]
                start += len(b.rows)

    def _one_mask(self, e: TorchSamEmbedding, points: npt.NDArray[np.float32], settings: Everything) -> Candidates:
        """Meta's single mask a point: the decoder in one step, its filters on the device."""
        chunks = batches(points, self._step(len(points)))
        if len(chunks) == 1:
            masks, ious = self._decode_one_mask(e, points)
        else:  # each call's outputs are its graph's own, overwritten by the next replay: copied
            decoded = [tuple(t.clone() for t in self._decode_one_mask(e, c)) for c in chunks]
            masks, ious = torch.cat([m for m, _ in decoded]), torch.cat([i for _, i in decoded])
        return torch_steps.batch_candidates(masks, ious, points, e.picture_height, e.picture_width, settings=settings)

    def _feeds(self, e: TorchSamEmbedding, points: npt.NDArray[np.float32], size: int) -> list[torch.Tensor]:
        """The decoder's seven inputs for grid points (one picture, no mask input), padded to
        `size` with copies of the last point."""
        d = self.device
        padded = np.concatenate([points, np.repeat(points[-1:], size - len(points), axis=0)])
        coords, labels = grid_point_feeds(padded, e.picture_height, e.picture_width)
        return [
            e.image_embed,
            e.high_res_feats_0,
            e.high_res_feats_1,
            torch.from_numpy(coords).to(d, non_blocking=True),
            torch.from_numpy(labels).to(d, non_blocking=True),
            torch.zeros((size, 1, LOW_RES, LOW_RES), dtype=torch.float32, device=d),  # no mask input
            torch.zeros((size,), dtype=torch.float32, device=d),
        ]

    def _attend_call(
        self, e: TorchSamEmbedding, points: npt.NDArray[np.float32]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`attend` on `points`: cells [N, 4096, 256], 32-vectors [N, 3, 32] and IoUs [N, 3], on the device."""
        n = len(points)
        size = self.size(n)
        cells, hyper, ious = self.attend((size,), self._feeds(e, points, size))
        return cells[:n], hyper[:n], ious[:n]

    def _masks(self, e: TorchSamEmbedding, cells: torch.Tensor, hyper: torch.Tensor) -> torch.Tensor:
        """`predict_masks` on gathered points (in calls of `call` points, the last padded): logits
        [P, 3, 256, 256] on the device."""
        step = self._step(len(cells))
        parts = []
        for start in range(0, len(cells), step):
            c, h = cells[start : start + step], hyper[start : start + step]
            n = len(c)
            size = self.size(n)
            if size > n:
                c = torch.cat([c, c[-1:].expand(size - n, *c.shape[1:])])
                h = torch.cat([h, h[-1:].expand(size - n, *h.shape[1:])])
            (masks,) = self.predict_masks((size,), [c, h, e.high_res_feats_0, e.high_res_feats_1])
            parts.append(masks[:n].clone() if len(cells) > step else masks[:n])
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _decode_one_mask(
        self, e: TorchSamEmbedding, points: npt.NDArray[np.float32]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Meta's one mask for each of `points`: logits [N, 1, 256, 256] and IoUs [N, 1] on the device."""
        n = len(points)
        size = self.size(n)
        feeds = self._feeds(e, points, size)
        masks, ious = self.decode_one_mask(e, n, size, feeds[3:])
        return masks[:n], ious[:n]


@dataclass(eq=False)
class _GridBatch:
    """One batch of grid points on its way through the two steps: the IoUs of its points' masks
    (Meta's order: the three of point 0, then of point 1, ...), the masks above the threshold
    (`kept`, indices in that order), their points (`rows`) with their cells and 32-vectors, then
    those points' masks."""

    index: int
    e: TorchSamEmbedding
    points: npt.NDArray[np.float32]
    settings: Everything
    scores: list[npt.NDArray[np.float32]] = field(default_factory=list)
    kept: list[npt.NDArray[np.int64]] = field(default_factory=list)
    rows: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    cells: list[torch.Tensor] = field(default_factory=list)
    hyper: list[torch.Tensor] = field(default_factory=list)
    masks: torch.Tensor | None = None  # [len(rows), 3, 256, 256]

    def take(self, start: int, scores: npt.NDArray[np.float32], cells: torch.Tensor, hyper: torch.Tensor) -> None:
        """The `attend` outputs of the points from `start` on: the IoUs, and the cells and
        32-vectors of the points with a mask above the threshold."""
        self.scores.append(scores)
        kept = iou_kept(scores, self.settings)
        self.kept.append(kept + start * NUM_MULTIMASK)
        needed = np.unique(kept // NUM_MULTIMASK)
        if needed.size:
            index = torch.from_numpy(needed).to(cells.device)
            self.cells.append(cells.index_select(0, index))
            self.hyper.append(hyper.index_select(0, index))
            self.rows = np.concatenate([self.rows, needed + start])

    def candidates(self) -> Candidates:
        """The masks above the threshold, through the stability filter (Meta's order kept)."""
        scores = np.concatenate(self.scores)
        kept = np.concatenate(self.kept)
        if kept.size == 0:
            return Candidates()
        assert self.masks is not None
        tokens = NUM_MULTIMASK
        at = np.searchsorted(self.rows, kept // tokens) * tokens + kept % tokens
        logits = self.masks.reshape(-1, *self.masks.shape[-2:]).index_select(
            0, torch.from_numpy(at).to(self.masks.device)
        )
        origins = np.repeat(np.asarray(self.points, np.float32), tokens, axis=0)
        e = self.e
        return torch_steps.kept_candidates(
            logits, kept, scores, origins, height=e.picture_height, width=e.picture_width, settings=self.settings
        )
