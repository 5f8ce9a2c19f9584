"""ONNX -> torch weight conversions, one module per network (pure functions).

Each module exposes `CONVERTER` (a craftai_prepare.conversion.Converter): its revision, which the
catalogue's route names, and the function that converts, checks and writes the prepared files.
"""


class ConversionError(ValueError):
    """The graph is not the network a converter knows, or the converted network does not reproduce it."""
