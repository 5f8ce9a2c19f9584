"""SAM 2.1 hiera tiny (Ravi et al. 2024), the image path, in PyTorch, and its contract.

Parts, one module each: `hiera` (the trunk), `fpn_neck`, `image_encoder` (trunk + neck),
`prompt_encoder`, `two_way_transformer`, `mask_decoder`; `model` puts them together behind the
samexporter contract (`encode`, `decode`). Parameter names follow Meta's checkpoints, with
`sam_prompt_encoder`/`sam_mask_decoder` shortened to `prompt_encoder`/`mask_decoder`.
`contract` names the published graphs' inputs and outputs and needs no torch: this package's
`__init__` imports nothing, so that an onnxruntime-only installation can read the contract.
"""
