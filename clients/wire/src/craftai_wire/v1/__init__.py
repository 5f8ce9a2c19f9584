"""Generated gRPC stubs for protos/craftai/v1 (tools/gen_protos.py; never edit by hand)."""
