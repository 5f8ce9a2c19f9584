"""craft-ai infer service: engines, networks, pipelines and sessions."""
