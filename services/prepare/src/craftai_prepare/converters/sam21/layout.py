"""SAM 2.1 graphs, step 2a: what the network expects, in the order it runs its layers.

The layers of each file (convs, linears, norms) form one dependency chain, so an exporter writes
them in the order `Sam2ImageModel` runs them: `encoder_layout` and `decoder_layout` list them in
that order, each by its kind and its module path in the network. The other weights (tables,
tokens, embeddings) may be computed anywhere; the singletons say how many of each kind a file has.
"""

from __future__ import annotations

from dataclasses import dataclass

from craftai_models.sam2.hiera import HieraConfig

# Parameters of the prompt encoder that are found by pattern, not by module path.
LABEL_KEYS = {
    -1: "prompt_encoder.not_a_point_embed.weight",
    0: "prompt_encoder.point_embeddings.0.weight",
    1: "prompt_encoder.point_embeddings.1.weight",
    2: "prompt_encoder.point_embeddings.2.weight",
    3: "prompt_encoder.point_embeddings.3.weight",
}
FOURIER_KEY = "prompt_encoder.pe_layer.positional_encoding_gaussian_matrix"


# The kinds of operation that are layers: matched one to one, in the order of the layout.
LAYER_KINDS = frozenset({"linear", "conv", "conv_transpose", "layer_norm", "layer_norm_2d"})


@dataclass(frozen=True)
class Expect:
    """One weighted operation the network runs: its kind (as `ops` names them) and where it goes."""

    kind: str
    key: str  # module path in Sam2ImageModel (or a parameter key for single tensors)


def _linear(key: str) -> Expect:
    return Expect("linear", key)


def encoder_layout(cfg: HieraConfig) -> list[Expect]:
    """The image encoder's layers: Hiera's patch embedding and blocks, the FPN neck, then the two
    convs that the mask decoder applies to the high-resolution features (run once per picture)."""
    trunk = "image_encoder.trunk"
    out = [Expect("conv", f"{trunk}.patch_embed.proj")]
    dims = [cfg.embed_dim * 2**s for s, n in enumerate(cfg.stages) for _ in range(n)]
    for i in range(sum(cfg.stages)):
        block = f"{trunk}.blocks.{i}"
        dim_in = dims[i - 1] if i else dims[0]
        out.append(Expect("layer_norm", f"{block}.norm1"))
        if dim_in != dims[i]:
            out.append(_linear(f"{block}.proj"))
        out += [
            _linear(f"{block}.attn.qkv"),
            _linear(f"{block}.attn.proj"),
            Expect("layer_norm", f"{block}.norm2"),
            _linear(f"{block}.mlp.layers.0"),
            _linear(f"{block}.mlp.layers.1"),
        ]
    out += [Expect("conv", f"image_encoder.neck.convs.{i}.conv") for i in range(len(cfg.stages))]
    out += [Expect("conv", "mask_decoder.conv_s0"), Expect("conv", "mask_decoder.conv_s1")]
    return out


# Operations found by their pattern alone, wherever they sit: how many of each the graph must have.
ENCODER_SINGLETONS = {"position_embedding": 1, "no_mem_embed": 1}
DECODER_SINGLETONS = {"fourier": 2, "label_embedding": len(LABEL_KEYS), "no_mask_embed": 1, "tokens": 1}


def _attention(prefix: str) -> list[Expect]:
    return [_linear(f"{prefix}.{p}_proj") for p in ("q", "k", "v", "out")]


def decoder_layout(depth: int = 2, num_mask_tokens: int = 4) -> list[Expect]:
    """The decoder file's layers: the mask prompt's downscaling, the two-way transformer, the
    upscaling, the per-token hypernetwork MLPs, then the IoU head."""
    md = "prompt_encoder.mask_downscaling"
    out = [
        Expect("conv", f"{md}.0"),
        Expect("layer_norm_2d", f"{md}.1"),
        Expect("conv", f"{md}.3"),
        Expect("layer_norm_2d", f"{md}.4"),
        Expect("conv", f"{md}.6"),
    ]
    tr = "mask_decoder.transformer"
    for i in range(depth):
        layer = f"{tr}.layers.{i}"
        out += [*_attention(f"{layer}.self_attn"), Expect("layer_norm", f"{layer}.norm1")]
        out += [*_attention(f"{layer}.cross_attn_token_to_image"), Expect("layer_norm", f"{layer}.norm2")]
        out += [_linear(f"{layer}.mlp.layers.0"), _linear(f"{layer}.mlp.layers.1")]
        out += [Expect("layer_norm", f"{layer}.norm3")]
        out += [*_attention(f"{layer}.cross_attn_image_to_token"), Expect("layer_norm", f"{layer}.norm4")]
    out += [*_attention(f"{tr}.final_attn_token_to_image"), Expect("layer_norm", f"{tr}.norm_final_attn")]
    up = "mask_decoder.output_upscaling"
    out += [
        Expect("conv_transpose", f"{up}.0"),
        Expect("layer_norm_2d", f"{up}.1"),
        Expect("conv_transpose", f"{up}.3"),
    ]
    for t in range(num_mask_tokens):
        out += [_linear(f"mask_decoder.output_hypernetworks_mlps.{t}.layers.{j}") for j in range(3)]
    out += [_linear(f"mask_decoder.iou_prediction_head.layers.{j}") for j in range(3)]
    return out
