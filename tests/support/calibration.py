"""Random-weight fixtures that do not saturate: BatchNorm statistics measured on a real input.

With random weights, activations grow or shrink from stage to stage until the final sigmoid is one
value; setting every BatchNorm's running statistics to those of one forward pass keeps each stage
near unit scale, so that comparisons at every stage mean something.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch
from torch import Tensor, nn


def calibrate_batchnorm(
    model: nn.Module, run: Callable[[], object], *, skip: Collection[nn.Module] = (), seed: int = 0
) -> dict[str, Tensor]:
    """Every BatchNorm of `model` but those in `skip` gets the statistics of the batch `run` passes
    through it (one call); returns the state dict, `num_batches_tracked` random again."""
    skipped = {id(m) for m in skip}
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d) and id(m) not in skipped]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average: one batch -> exactly its statistics
        bn.train()
    with torch.no_grad():
        run()
    for bn in bns:
        bn.momentum = 0.1
        bn.eval()
        var = bn.running_var
        assert var is not None
        var.clamp_(min=0.05 * float(var.mean()))  # a (nearly) constant channel would amplify rounding
    gen = torch.Generator().manual_seed(seed + 1)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for key in state:
        if key.endswith("num_batches_tracked"):
            state[key] = torch.randint(0, 10_000, (), generator=gen, dtype=torch.int64)
    return state
