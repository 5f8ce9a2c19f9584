"""Engines that run a loaded route: onnxruntime, torch, and OpenVINO (opt-in, u2netp on the CPU)."""
