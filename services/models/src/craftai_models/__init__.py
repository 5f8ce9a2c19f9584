"""Networks written in PyTorch in this project, one module per network."""
