"""rembg's pre- and post-processing (craftai_infer.pipelines.matte_u2netp) on torch, bit for bit, so a
GPU route can keep the picture on the device: the same bytes as `preprocess` / `postprocess` for
every `Steps`, on any device.

Restated: Pillow's 8-bit Lanczos resizes (craftai_infer.pipelines.pillow_resize, in Pillow 13's pass
order); rembg's float64 arithmetic (divided by the picture's own maximum, then (x − mean) / std,
rounded to float32); after the network, the sigmoid in float32 where `steps.sigmoid`, the min-max
in float32, `* 255` truncated to 8 bits as numpy's `astype` truncates, the empty matte for a
constant map, and the Lanczos resize back.

The sigmoid needs numpy's own float32 `exp`, which is not the correctly rounded one: on an x86-64
CPU with AVX2 and FMA (or AVX-512F) numpy computes it with its own SIMD code (a Cody-Waite range
reduction and a rational approximation with fused multiply-adds; about two in five results differ
from the correctly rounded exp by an ulp, as do torch's). `numpy_exp_f32` restates that code, each
fused multiply-add computed exactly in float64 and rounded once to float32 (round to odd first, so
that the second rounding is right). On a CPU without AVX2 (ARM, or x86-64 before Haswell) numpy
calls the C library's `expf` instead, and the sigmoid steps (`BIREFNET`) may differ from that
host's numpy by an ulp, and so a matte level here and there; the other steps never take an exp.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from craftai_infer.pipelines import matte_u2netp
from craftai_infer.pipelines.matte_u2netp import U2NET, Steps
from craftai_infer.pipelines.pillow_resize import resize_lanczos_by_passes

__all__ = ["disagreement", "numpy_exp_f32", "postprocess_torch", "preprocess_torch", "usable_on"]
log = logging.getLogger("craftai.infer.routes")


def _f32(value: str) -> float:
    """A C float literal's value (the decimal rounded once to float32, as the compiler does)."""
    return float(np.float32(np.longdouble(value)))


# numpy/_core/src/umath/npy_simd_data.h (numpy 2.x): the float32 exp's constants.
_LOG2E = _f32("1.442695040888963407359924681001892137")
_MAGIC = 12582912.0  # 0x1.8p+23: adding and subtracting it rounds to the nearest integer
_LN2_HIGH = _f32("-6.93145752e-1")
_LN2_LOW = _f32("-1.42860677e-6")
_P = [
    _f32("9.999999999980870924916e-01"),
    _f32("7.257664613233124478488e-01"),
    _f32("2.473615434895520810817e-01"),
    _f32("5.114512081637298353406e-02"),
    _f32("6.757896990527504603057e-03"),
    _f32("5.082762527590693718096e-04"),
]
_Q = [1.0, _f32("-2.742335390411667452936e-01"), _f32("2.159509375685829852307e-02")]
_XMAX = 88.72283935546875
_XMIN = -103.97208404541015625


def _fma(a: Tensor, b: Tensor | float, c: Tensor | float) -> Tensor:
    """float32 a·b + c rounded once, as an FMA instruction: the product is exact in float64, the sum
    is rounded to odd in float64 (its error found exactly by Knuth's two-sum), then to float32."""
    product = a.double() * (b.double() if isinstance(b, Tensor) else b)
    addend = c.double() if isinstance(c, Tensor) else torch.full_like(product, c)
    total = product + addend
    back = total - addend
    error = (product - back) + (addend - (total - back))
    even = (total.view(torch.int64) & 1) == 0
    towards = torch.where(error > 0, torch.full_like(total, float("inf")), torch.full_like(total, float("-inf")))
    total = torch.where((error != 0) & even, torch.nextafter(total, towards), total)
    return total.float()


def numpy_exp_f32(x: Tensor) -> Tensor:
    """numpy's float32 `exp` on an AVX2/AVX-512 CPU (`simd_exp_FLOAT`), on any device: NaN stays
    NaN, x >= 88.72… gives inf, x <= −103.97… gives 0."""
    x = x.float()
    nan = torch.isnan(x)
    high = x >= _XMAX
    low = x <= _XMIN
    x = torch.where(nan | high | low, torch.zeros_like(x), x)
    quadrant = (x * _LOG2E + _MAGIC) - _MAGIC  # float32 operations, each rounded
    r = _fma(quadrant, _LN2_HIGH, x)
    r = _fma(quadrant, _LN2_LOW, r)  # numpy's third step adds quadrant·0: r unchanged
    num = _fma(torch.full_like(r, _P[5]), r, _P[4])
    for coefficient in (_P[3], _P[2], _P[1], _P[0]):
        num = _fma(num, r, coefficient)
    den = _fma(torch.full_like(r, _Q[2]), r, _Q[1])
    den = _fma(den, r, _Q[0])
    poly = num / den
    # poly · 2^quadrant, exactly (AVX-512's scalef; −150 <= quadrant <= 128): two powers of two
    # built from their bits, so that neither overflows nor is rounded.
    n = quadrant.to(torch.int32)
    half = torch.div(n, 2, rounding_mode="floor")
    rest = n - half
    out = poly * ((half + 127) << 23).view(torch.float32) * ((rest + 127) << 23).view(torch.float32)
    out = torch.where(high, torch.full_like(out, float("inf")), out)
    out = torch.where(low, torch.zeros_like(out), out)
    return torch.where(nan, torch.full_like(out, float("nan")), out)


def preprocess_torch(pictures: Sequence[Tensor], steps: Steps = U2NET) -> Tensor:
    """(H, W, 3) RGB or (H, W, 4) RGBA uint8 pictures on one device -> f32[N, 3, S, S] there (S the
    steps' size), equal to `matte_u2netp.preprocess` of each, concatenated. The alpha is dropped,
    not composited, as rembg's conversion to RGB drops it."""
    side = steps.size
    small = torch.stack([resize_lanczos_by_passes(p[:, :, :3], side, side) for p in pictures])
    pixels = small.to(torch.float64)  # (N, S, S, 3)
    peak = small.amax(dim=(1, 2, 3), keepdim=True).to(torch.float64).clamp_min(1e-6)  # max(max, 1e-6)
    pixels = pixels / peak
    pixels = pixels - torch.tensor(steps.mean, dtype=torch.float64, device=pixels.device)
    pixels = pixels / torch.tensor(steps.std, dtype=torch.float64, device=pixels.device)
    return pixels.permute(0, 3, 1, 2).to(torch.float32).contiguous()


def postprocess_torch(first_output: Tensor, sizes: Sequence[tuple[int, int]], steps: Steps = U2NET) -> list[Tensor]:
    """First output (N, 1, S, S) (sigmoid applied, or logits where `steps.sigmoid`) and each
    picture's (width, height) -> (height, width) uint8 mattes on its device, equal to
    `matte_u2netp.postprocess` of each map (taken as float32, as the numpy code gets it)."""
    maps = first_output[:, 0].float()
    if steps.sigmoid:
        maps = 1 / (1 + numpy_exp_f32(-maps))
    high = maps.amax(dim=(1, 2), keepdim=True)
    low = maps.amin(dim=(1, 2), keepdim=True)
    # A constant map (or one with a NaN, where numpy's `high > low` is false too) gives an empty matte.
    scaled = torch.where(high > low, (maps - low) / (high - low), torch.zeros_like(maps))
    small = (scaled * 255).to(torch.uint8)  # in [0, 255]: truncated toward zero, as astype does
    return [resize_lanczos_by_passes(small[i], height, width) for i, (width, height) in enumerate(sizes)]


# The shapes a route checks the steps on, on its device, before it uses them: landscape and portrait
# frames reduced (each pass order of Pillow 13), a small picture with alpha, and the mattes enlarged.
PROBES = ((1080, 1920, 3), (1920, 1080, 3), (300, 451, 4))


def disagreement(steps: Steps, device: torch.device, seed: int = 0) -> str | None:
    """None where `preprocess_torch` and `postprocess_torch` on `device` answer exactly what
    `matte_u2netp.preprocess` and `postprocess` answer on this host for made pictures of every
    PROBES shape; else what differed. A route runs this once as it loads: the steps are proven on
    CPU tensors by the tests, and this proves the device's arithmetic (and this host's numpy)."""
    rng = np.random.default_rng(seed)
    for shape in PROBES:
        height, width = shape[:2]
        ramp = np.linspace(0, 255, width, dtype=np.float64)[None, :, None]
        picture = np.clip(ramp + rng.normal(0, 40, size=shape), 0, 255).astype(np.uint8)  # edges and noise
        ours = preprocess_torch([torch.from_numpy(picture).to(device)], steps).cpu().numpy()
        theirs = matte_u2netp.preprocess(picture, steps=steps)
        if ours.shape != theirs.shape or not np.array_equal(ours.view(np.int32), theirs.view(np.int32)):
            return f"the {width}x{height} picture's network input differs from Pillow's and numpy's"
        logits = rng.normal(0, 4 if steps.sigmoid else 0.3, size=(1, 1, steps.size, steps.size)).astype(np.float32)
        maps = logits if steps.sigmoid else (1 / (1 + np.exp(-logits))).astype(np.float32)
        matte = postprocess_torch(torch.from_numpy(maps).to(device), [(width, height)], steps)[0].cpu().numpy()
        if not np.array_equal(matte, matte_u2netp.postprocess(maps, (width, height), steps)):
            return f"the matte enlarged to {width}x{height} differs from Pillow's and numpy's"
    return None


def usable_on(device: str, steps: Steps, step: Callable[[str], None], route: str) -> bool:
    """What a GPU route's `warm_up` asks: are the steps on `device` this host's Pillow and numpy,
    byte for byte (`disagreement`)? Said as the load's progress; a difference said in the log."""
    step("checking rembg's resizes and arithmetic on the GPU against Pillow's")
    problem = disagreement(steps, torch.device(device))
    if problem is not None:
        log.warning("%s on %s: %s; its resizes stay on the CPU (Pillow)", route, device, problem)
    return problem is None
