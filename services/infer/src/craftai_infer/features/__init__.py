"""The features, one module each: what a request does from its route to its answer.

`matte` (image.matte) and `segment` (image.segment) own resolve -> load -> decode -> run -> encode
for their RPCs; `run` times their stages and turns a run into an RPC's event stream; `context`
holds what they share (the loaded routes, the CPU pool, the picture decoder, the settings).
"""
