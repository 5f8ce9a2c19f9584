"""CUDA graphs: a network's launches recorded once per input shape and replayed as one.

Small fixed-shape work (the SAM decoder, the encoder at 1024², u2netp at 320²) is bound by the
cost of launching hundreds of small kernels, not by arithmetic; a replayed graph launches them all
at once. Captures share one memory pool and are made on first use of a shape (or at load, for the
shapes a route always uses), kept in an LRU of bounded size. Replays return the graph's own output
tensors: a caller that keeps a result past the next replay must clone it.

A capture is checked for unsafe calls on its own thread only (`capture_error_mode="thread_local"`):
the CPU pool copies pictures into page-locked memory meanwhile (craftai_infer.engines.staging), and
in the default global mode such a call from another thread broke the capture (a SAM encoder graph
captured under load failed so, and the route fell back to the CPU).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

Fn = Callable[..., Sequence[torch.Tensor]]


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]


class GraphCache:
    """Replays `fn` through CUDA graphs keyed by the caller (e.g. by input shape)."""

    def __init__(self, fn: Fn, device: torch.device, *, capacity: int = 16, warmup: int = 2) -> None:
        if device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self._fn = fn
        self._device = device
        self._capacity = capacity
        self._warmup = warmup
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: OrderedDict[Hashable, _Captured] = OrderedDict()

    def __len__(self) -> int:
        return len(self._graphs)

    def run(self, key: Hashable, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        captured = self._graphs.get(key)
        if captured is None:
            captured = self._capture(inputs)
            self._graphs[key] = captured
            while len(self._graphs) > self._capacity:
                self._graphs.popitem(last=False)
        else:
            self._graphs.move_to_end(key)
        for static, value in zip(captured.inputs, inputs, strict=True):
            static.copy_(value, non_blocking=True)
        captured.graph.replay()
        return captured.outputs

    def _capture(self, inputs: Sequence[torch.Tensor]) -> _Captured:
        static = [t.detach().clone() for t in inputs]
        side = torch.cuda.Stream(self._device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(self._warmup):  # lets cuDNN/cuBLAS pick and allocate their workspaces first
                self._fn(*static)
        torch.cuda.current_stream(self._device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"), torch.inference_mode():
            outputs = list(self._fn(*static))
        return _Captured(graph, static, outputs)


class NetworkGraphs:
    """A network's forward captured once per input shape and replayed. The output is the graph's
    own tensor: see above."""

    def __init__(self, network: torch.nn.Module, device: torch.device, *, capacity: int) -> None:
        self._network = network
        self._graphs = GraphCache(self._forward, device, capacity=capacity)

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self._network(x),)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._graphs.run(tuple(x.shape), [x])[0]


class ChannelsLastGraphs(NetworkGraphs):
    """A network moved to channels-last whose forward is captured once per input shape and replayed
    (what the convolutional routes do on a GPU)."""

    def __init__(self, network: torch.nn.Module, device: torch.device, *, capacity: int) -> None:
        network.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        super().__init__(network, device, capacity=capacity)

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self._network(x.contiguous(memory_format=torch.channels_last)),)
