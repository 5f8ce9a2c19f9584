#!/usr/bin/env bash
# Test-only reference implementations (run by tools/bootstrap.sh --dev into .venv).
# They are compared against in tests/parity; no service package depends on them.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/installer.sh  # `install`: uv or pip, with constraints.txt (compiled by bootstrap.sh)

# rembg: the peer users would otherwise pick for u2netp (tests/parity, tools/bench).
install rembg==2.0.86
# What rembg's command line imports beside its library (`rembg b`: the peer of tools/bench/frames.py).
install filetype watchdog aiohttp asyncer

# InSPyReNet reference: transparent-background's network, imported without its package __init__
# (craftai_dev.inspyrenet_reference). --no-deps: its Remover/GUI dependencies and timm's
# torchvision are not needed by the network, and PyPI's torchvision does not import beside the CPU
# torch. Versions: constraints.txt; kornia and opencv come from requirements-dev.txt.
install --no-deps transparent-background timm

# SAM 2 reference: Meta's sam2 code (PyPI sdist 1.1.0 == facebookresearch/sam2@2b90b9f), CPU only.
# --no-deps: its setup.py asks for torchvision, which would replace the pinned CPU torch. PyPI's
# torchvision cannot load beside torch 2.13.0+cpu (its _C needs libtorch_cuda), so the parity test
# stands in the three torchvision transforms that SAM2Transforms uses (craftai_dev.sam_fixture).
# hydra-core, omegaconf and iopath (imported by sam2 at module level) are pinned in requirements-dev.txt.
SAM2_BUILD_CUDA=0 SAM2_BUILD_ALLOW_ERRORS=0 install --no-deps --no-build-isolation sam2==1.1.0

# BiRefNet reference: nobg's network (nobg/birefnet/modeling_birefnet.py, transformers' Swin), imported
# without its package __init__ (craftai_dev.birefnet_reference). --no-deps: nobg asks for datasets
# and loadimg, which the network does not need; transformers and huggingface-hub (what it needs) come
# from requirements-dev.txt. torchvision's deform_conv2d, which it imports, is stood in for where
# torchvision does not import (here); the GPU machine has the real one.
install --no-deps nobg

# U²-Net (full) reference: the authors' network module (U-2-Net `model/u2net.py`, class U2NET) as
# backgroundremover ships it (backgroundremover/u2net/u2net.py), imported without its package and
# without torchvision, which the module imports but U2NET does not use (craftai_dev.u2net_reference).
# --no-deps: its video and server dependencies are not needed by the network.
install --no-deps backgroundremover

# IS-Net references (Qin et al., ECCV 2022): the DIS authors' network module (DIS `IS-Net/models/isnet.py`,
# class ISNetDIS) as dis-inference ships it, and SkyTNT's copy for anime (its ISNetDIS answers logits)
# as anime-seg ships it (anime_seg/remove_bg/isnet.py). Both
# modules are imported by path, without their packages (craftai_dev.isnet_reference). --no-deps: their
# CLIs' and pipelines' dependencies are not needed by the networks.
install --no-deps dis-inference anime-seg
