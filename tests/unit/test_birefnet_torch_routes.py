"""The Swin-L torch routes built from a prepared folder on the CPU (the calibrated BiRefNet_lite
checkpoint standing in, its record naming that configuration): what each admits and refuses before
a picture runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from craftai_dev.birefnet_fixture import checkpoints, prepared_folder
from craftai_infer.pipelines import matte_birefnet
from craftai_infer.routes import ModelRefusedError, RouteFiles
from craftai_models.birefnet import PREPARED_SETTINGS, PREPARED_WEIGHTS, TRAINED_ORDER, write_prepared


def test_the_dynamic_routes_working_memory_follows_its_input_size_and_stops_growing_at_2304() -> None:
    from craftai_infer.routes.birefnet_dynamic_torch import BirefnetDynamicTorch

    route = BirefnetDynamicTorch(RouteFiles({}, prepared_folder(checkpoints()["random"]), 0), "cpu")

    def network(height: int, width: int) -> int:
        return route.working_bytes(height, width) - matte_birefnet.input_bytes(height, width)

    small, large, largest, larger = network(300, 451), network(1536, 2048), network(1728, 2304), network(3000, 4000)
    assert small < large < largest == larger  # 4000x3000 runs at 2304x1728
    assert large == small * (1536 * 2048) // (288 * 448)  # by the input's pixels


def test_rembgs_steps_refuse_a_checkpoint_prepared_at_another_side(tmp_path: Path) -> None:
    from craftai_infer.routes.birefnet_rembg_torch import BirefnetRembgTorch

    (tmp_path / PREPARED_WEIGHTS).symlink_to(checkpoints()["random"].path)
    write_prepared(tmp_path / PREPARED_SETTINGS, TRAINED_ORDER, side=512)
    with pytest.raises(ModelRefusedError, match="takes 512² pictures; rembg's steps for this recipe feed 1024²"):
        BirefnetRembgTorch(RouteFiles({}, tmp_path, 0), "cpu")
