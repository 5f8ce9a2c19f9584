"""craft-ai catalogue service: recipes, pins, engine advice and route states."""
