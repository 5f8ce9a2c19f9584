# craft-ai infer on an NVIDIA GPU: onnxruntime-gpu and a CUDA build of torch (falls back to the CPU).
#
#   docker build -f deploy/docker/infer-cuda.Dockerfile -t craftai-infer-cuda .      (from the repository root)
#
# Build args (docs/DEPLOY.md):
#   BASE_IMAGE       a CUDA runtime image with cuDNN, Ubuntu 22.04 (python3.11 comes from its universe
#                    component); its CUDA major version must match onnxruntime-gpu's (see the table
#                    in docs/DEPLOY.md) and the host driver must support it
#   TORCH_INDEX_URL  the PyTorch index of the matching CUDA build (cu130 for CUDA 13.0)
#   WHEELHOUSE       a folder of cp311 manylinux wheels (onnxruntime-gpu, torch+cu130, torchvision+cu130 and torch's nvidia-*
#                    wheels, ...) inside the context: makes the build offline
# Not built in CI (no GPU, no registry); run on a GPU host with the NVIDIA container toolkit:
#   docker run --gpus all ... craftai-infer-cuda
# Written for the legacy builder too: no BuildKit-only syntax.

ARG BASE_IMAGE=nvidia/cuda:13.0.1-cudnn-runtime-ubuntu22.04

# -- runtime: the CUDA base with Python 3.11 and the service user --------------------------------
# gcc, libc6-dev and python3.11-dev: Triton builds its small C kernel launchers when torch.compile
# first runs (CRAFTAI_GPU_COMPILE, the SAM grid decoder); without them the route runs uncompiled.
# /cache: where compose.gpu.yaml mounts inductor's kernel cache (owned by the service user).
FROM ${BASE_IMAGE} AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv ca-certificates gcc libc6-dev python3.11-dev \
 && ln -sf /usr/bin/python3.11 /usr/local/bin/python3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 craftai \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/craftai --create-home --shell /usr/sbin/nologin craftai \
 && mkdir -p /store /cache && chown 10001:10001 /store /cache
ENV PATH=/opt/craftai/bin:$PATH \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1

# -- wheels: the wheelhouse, the dependency lists and an empty virtual environment ---------------
FROM runtime AS wheels
ARG WHEELHOUSE=deploy/docker/wheelhouse
COPY ${WHEELHOUSE}/ /wheelhouse/
COPY constraints.txt deploy/docker/requirements.py deploy/docker/install.sh /build/
COPY clients/wire/pyproject.toml /build/clients/wire/
COPY clients/python/pyproject.toml /build/clients/python/
COPY services/common/pyproject.toml /build/services/common/
COPY services/models/pyproject.toml /build/services/models/
COPY services/catalogue/pyproject.toml /build/services/catalogue/
COPY services/prepare/pyproject.toml /build/services/prepare/
COPY services/infer/pyproject.toml /build/services/infer/
RUN python3 -m venv /opt/craftai

# -- project: the seven packages built as wheels from the sources in the context -----------------
FROM wheels AS project
COPY clients /src/clients
COPY services /src/services
RUN sh /build/install.sh wheels

# -- deps: this image's third-party dependencies (cached until a dependency list changes) --------
# onnxruntime-gpu (CUDA execution provider) and the CUDA build of torch (it brings its own CUDA
# libraries as nvidia-* wheels; onnxruntime-gpu uses the base image's CUDA and cuDNN), with its
# torchvision (gpu-jpeg: JPEG pictures decoded on the GPU by nvJPEG, CRAFTAI_GPU_JPEG).
FROM wheels AS deps
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
RUN sh /build/install.sh deps craftai "craftai-infer[onnx-gpu,torch,gpu-jpeg]"

# -- the image ---------------------------------------------------------------------------------------
FROM runtime
COPY --from=deps /opt/craftai /opt/craftai
COPY --from=project /project/ /tmp/project/
RUN /opt/craftai/bin/python -m pip install --no-cache-dir --disable-pip-version-check --no-index --no-deps \
        /tmp/project/craftai-[0-9]*.whl /tmp/project/craftai_wire-*.whl /tmp/project/craftai_common-*.whl /tmp/project/craftai_models-*.whl /tmp/project/craftai_infer-*.whl \
 && /opt/craftai/bin/python -m pip check \
 && rm -rf /tmp/project
COPY deploy/docker/craftai_setup.py /opt/craftai/bin/craftai-setup
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    XDG_CACHE_HOME=/tmp/.cache \
    CRAFTAI_HOST=0.0.0.0 \
    CRAFTAI_PORT=50051 \
    CRAFTAI_STORE=/store \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL org.opencontainers.image.title="craftai-infer-cuda" \
      org.opencontainers.image.description="craft-ai services: inference on an NVIDIA GPU (onnxruntime-gpu, torch CUDA), CPU fallback" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
WORKDIR /tmp
VOLUME ["/store"]
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "craftai_common.health_probe"]
CMD ["craftai-infer"]
