"""ONNX -> torch weight conversions, one module per network (pure functions)."""
