"""craft-ai prepare service: pinned downloads and the one-time conversion into the prepared cache."""
