"""Pre- and post-processing pipelines: pure functions around the networks."""
