"""Segment everything: Meta's automatic mask generator (`SAM2AutomaticMaskGenerator`) for one crop
layer (the whole picture). Its parameters are Meta's, with Meta's defaults (`Everything`).

Meta's steps, and where each is here:

1. a grid of points_per_side² points, each a single foreground click: the centres of an even
   grid over [0, 1]², times (width, height) (generator.py `grid_points`, over amg.py `point_grid`);
   cut in batches of points_per_batch (amg.py `batches`);
2. the decoder on a batch, its three masks per point (multimask; Meta's single mask with
   multimask_output false); with min_mask_region_area > 0, Meta's clean-up of the low-res logits
   (craftai_infer.pipelines.mask_cleanup, max_hole_area = max_sprinkle_area = that area: what
   Meta's generator passes its predictor);
3. per mask: kept when its predicted IoU is above pred_iou_thresh, then when its stability score
   (the IoU of the logits upscaled to the picture's size thresholded at mask_threshold +- offset)
   is at least stability_score_thresh; then thresholded at mask_threshold; its box (Meta's:
   first and last pixel, both included) and its run-length encoding kept (amg.py `Candidates`);
4. non-maximum suppression on those boxes by predicted IoU at box_nms_thresh (generator.py
   `select`, amg.py `nms`): the masks answered, best predicted IoU first.

Steps 2-3 run where the route's tensors are: in numpy on the host (generator.py
`batch_candidates`: the onnxruntime route, routes/sam2_onnx.py, one decoder call per point), or on
the device (torch_steps.py: the torch route). The torch route's decoder batches are run by
torch_batches.py `TorchGrid`: the transformer for every point, then the masks' upscaling only for
the points with a mask above pred_iou_thresh, several batches back to back before one read-back.
The service drives the steps (features/segment.py `SegmentFeature.everything`: the grid, each
batch through the route's GRID operation, `select`, the masks written); the request's options are
checked into `Everything` by craftai_infer.masks `check_everything`.

Meta's generator defines a full-resolution small-region removal (`postprocess_small_regions`)
but never calls it; min_mask_region_area acts through the low-res clean-up alone, and so here.

This package's face (below) needs numpy alone; the torch modules are imported by the torch route.
"""

from __future__ import annotations

from craftai_infer.pipelines.mask_generator.amg import Candidates, batches
from craftai_infer.pipelines.mask_generator.generator import Everything, batch_candidates, grid_points, select

__all__ = ["Candidates", "Everything", "batch_candidates", "batches", "grid_points", "select"]
