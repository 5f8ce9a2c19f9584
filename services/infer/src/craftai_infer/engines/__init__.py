"""Engines that run a loaded route: onnxruntime and torch."""
