"""craft-ai services: shared server code."""
