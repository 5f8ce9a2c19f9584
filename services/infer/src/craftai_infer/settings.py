"""Infer settings (environment variables with the prefix CRAFTAI_)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from craftai_common.settings import ServerSettings


class InferSettings(ServerSettings):
    catalogue_address: str = Field("", description="the catalogue service (host:port); embedded: this server")
    replica: str = Field(
        "",
        max_length=128,
        pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]*)?$",  # a host name's characters: it ends every session id
        description="this process's name among the service's replicas (sessions name it, metrics carry it); "
        "empty: the host name (a pod's name) and a per-process suffix",
    )
    replicas_target: str = Field(
        "",
        description="every replica of this service (its one name, dns:///infer:50051, or an address list): at "
        "start a replica asks each its name and refuses to start under one another replica answers to; "
        "empty: no check",
    )
    max_connection_age_seconds: float = Field(
        300.0,
        ge=0,
        description="connections are renewed after this (GOAWAY, calls in progress finish): the service's clients "
        "resolve its name again and spread over replicas added since, and a stalled stream's last bytes are freed; "
        "0: never",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: the GPU when one answers, else the CPU; cpu forces the CPU"
    )
    gpu_precision: Literal["auto", "fp32", "fp16", "bf16"] = Field(
        "auto", description="autocast on the GPU; auto: each route's tested default (docs/PERFORMANCE.md)"
    )
    gpu_compile: bool = Field(
        True,
        description="torch.compile where a GPU route offers it (SAM torch: SegmentEverything's decoder batches); "
        "the first load on a machine compiles for about a minute, later loads reuse inductor's cache",
    )
    gpu_jpeg: bool = Field(
        True,
        description="JPEG pictures for a route on a GPU are decoded there (nvJPEG through torchvision.io; "
        "the CPU decodes what it cannot); off: every picture on the CPU, strictly (docs/API.md, Pictures)",
    )
    max_picture_pixels: int = Field(50_000_000, gt=0, description="largest width*height accepted")
    max_picture_side: int = Field(16_384, gt=0, description="longest side accepted, in pixels")
    max_points: int = Field(64, gt=0, description="points per segmentation prompt")
    max_prompts: int = Field(64, gt=0, description="prompts (objects) per Segment or SegmentOnce call")
    max_points_per_side: int = Field(
        64, gt=0, description="SegmentEverything: the densest grid accepted (points_per_side, its square in points)"
    )
    max_points_per_batch: int = Field(
        256, gt=0, description="SegmentEverything: the most points one decoder call may take (points_per_batch)"
    )
    memory_limit_bytes: int = Field(
        0,
        ge=0,
        description="the memory this process may use, which the budgets below are sized from; 0: its cgroup's "
        "limit (a container's), else the machine's memory",
    )
    session_budget_bytes: int = Field(
        0,
        ge=0,
        description="memory for kept pictures (each tenant's least recently used evicted beyond it); "
        "0: 10% of the memory limit, 64 MiB to 1 GiB",
    )
    decode_budget_bytes: int = Field(
        0,
        ge=0,
        description="memory for the requests in progress (their pictures, outputs, masks and answers, estimated "
        "before they run): wait beyond it, refused when one alone is larger; 0: 30% of the memory limit, "
        "256 MiB to 8 GiB",
    )
    models_budget_bytes: int = Field(
        0,
        ge=0,
        description="memory for loaded models, each counted as what its load added (at least its files): before "
        "a load the least recently used idle models are unloaded until it fits; 0: what the memory limit leaves "
        "after the two budgets above, at least 512 MiB",
    )
    decode_wait_seconds: float = Field(
        30.0, gt=0, description="how long a request waits for room in the decode budget before MEMORY_BUDGET"
    )
    session_idle_seconds: float = Field(900.0, gt=0, description="a kept picture is forgotten after this idle time")
    batch_window_ms: float = Field(
        3.0, ge=0, description="requests arriving within this many ms run as one batch (models that batch)"
    )
    max_batch: int = Field(8, ge=1, le=64, description="largest batch; 1 turns batching off")
    max_sessions_per_app: int = Field(16, ge=0, description="kept pictures per app id; 0: no limit")
    frames_in_flight: int = Field(
        8, ge=1, description="MatteFrames: frames of one stream worked on at once (batched), unless the stream asks"
    )
    max_frames_in_flight: int = Field(32, ge=1, description="MatteFrames: the most frames in flight a stream may ask")
    frames_idle_seconds: float = Field(
        60.0, gt=0, description="MatteFrames: a stream whose caller sends nothing for this long is ended (STREAM_IDLE)"
    )
    max_frames_seconds: float = Field(
        86400.0, gt=0, description="MatteFrames: the longest a frame stream may last (its call's time limit)"
    )
    fault_injection: Literal["", "gpu-oom-once", "slow-model"] = Field(
        "", description="test hook for machines without a GPU (craftai_infer/faults.py); never in production"
    )
    cpu_threads: int = Field(0, ge=0, description="threads per model on the CPU; 0: one per core")
    cpu_spin: bool = Field(
        False,
        description="onnxruntime's CPU threads spin between runs (its default); off: they sleep, leaving the"
        " cores to the server's decoding, encoding and gRPC threads (docs/PERFORMANCE.md)",
    )
    interactive_matte_pixels: int = Field(
        2_100_000,
        ge=0,
        description="a matte of a picture with at most this many pixels is interactive work (run before bulk work: "
        "encodes, segment everything, larger mattes); 0: every matte is bulk",
    )
    bulk_niceness: int = Field(
        10,
        ge=0,
        le=19,
        description="on the CPU, bulk work (encodes, segment everything, large mattes, their decodes and encodes) "
        "runs on threads this much lower in CPU priority (nice) than interactive work, so that a click keeps its "
        "speed on cores busy with another app's bulk work; 0: the same priority",
    )
    png_compress_level: int = Field(1, ge=0, le=9, description="zlib level of the PNGs answered (1: fast)")
