"""rembg's IS-Net graphs (isnet-general-use, isnet-anime) -> a state_dict for craftai_models.isnet.IsNet.

IS-Net is U²-Net's stages behind a stride-2 input convolution, so the graph is followed by U²-Net's
walk (converters/u2netp.py: node by node from the graph input, weights taken by structure wherever
they are stored, BatchNorms folded, every node matched) with IS-Net's head: the stem, then each side
map resized to the input's size and passed through a sigmoid. The published graphs were exported for
1024² pictures and carry their resize sizes as constants; each size is checked to be the skip
tensor's at that input size, the size the route always feeds.

The two files differ in their outputs (the evidence: docs/research/weights.md): the general one
declares the six side maps, then the six decoder features; the anime one (SkyTNT's export of the
sigmoid of the first side map) only that map, its other side convolutions gone from the graph, so
its network is built with one side output. The prepare step checks the converted network against
onnxruntime on the published file (the probe at 1024², rembg's normalisation of the recipe) before
it keeps anything.
"""

from __future__ import annotations

from functools import partial

from craftai_models import imagenet
from craftai_models.isnet import INPUT_SIZE, WEIGHTS, WEIGHTS_ANIME, IsNet
from craftai_prepare.converters import Converter, own_files_only
from craftai_prepare.converters.u2netp import Network, Walk, preparation

#: Bump whenever the converter's output could change (part of the prepared revision).
CONVERTER_VERSION = 1
#: Largest absolute difference allowed between the converted network (torch, fp32, CPU) and the
#: source graph (onnxruntime, CPU) on side 1, the map that is served. Neither engine is exact: on
#: the stand-ins (craftai_dev.isnet_fixture: side 1's readout fitted with large weights, whose sums
#: cancel) each is 2.6e-4 to 3.3e-4 off a float64 run of the same weights on the probe, and the two
#: 3.2e-4 apart. A real conversion mistake is far above it: 1% off one conv's weights in De_3 moves
#: side 1 by 0.042, swapped colour channels or two of En_6's convs swapped by 0.98 and more.
SERVED_MAX_ABS_TOLERANCE = 1e-3
#: The same for sides 2 to 6 (isnet-general-use's graph answers them): within 6e-5 on the probe.
SIDE_MAX_ABS_TOLERANCE = 5e-4

SIDES = tuple(f"side_{k}" for k in range(1, 7))


class IsNetWalk(Walk):
    """IS-Net's graph: IsNet.forward, its side maps first, then the decoder's features."""

    def network(self, x: str) -> list[str]:
        stem = self.conv(x, "stem", relu=False)
        decoded = self.stages(stem)
        assert isinstance(self.module, IsNet)
        maps = []
        for k in range(1, self.module.sides + 1):
            side = self.conv(decoded[k], f"side_{k}", relu=False)
            maps.append(self.sigmoid(self.upsample_like(side, x), f"the sigmoid of side {k}"))
        return [*maps, *(decoded[k] for k in range(1, 7))]


def _network(name: str, sides: int, weights: str, mean: tuple[float, float, float]) -> Network:
    return Network(
        name,
        partial(IsNet, sides),
        IsNetWalk,
        weights,
        f"{name}-torch.{CONVERTER_VERSION}",
        outputs=SIDES[:sides],
        tolerances=(SERVED_MAX_ABS_TOLERANCE, SIDE_MAX_ABS_TOLERANCE),
        side=INPUT_SIZE,
        mean=mean,
        std=(1.0, 1.0, 1.0),
        threads=0,
    )


#: rembg's normalisation of each recipe: its picture divided by its maximum, less the mean, std 1.
GENERAL = _network("isnet-general-use", 6, WEIGHTS, (0.5, 0.5, 0.5))
ANIME = _network("isnet-anime", 1, WEIGHTS_ANIME, imagenet.MEAN)

CONVERTER = Converter(GENERAL.revision, own_files_only(preparation(GENERAL)), steps=4)
CONVERTER_ANIME = Converter(ANIME.revision, own_files_only(preparation(ANIME)), steps=4)
