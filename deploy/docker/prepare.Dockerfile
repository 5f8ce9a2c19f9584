# craft-ai prepare: pinned downloads checked byte for byte, one-time conversions (torch CPU, onnx,
# onnxruntime for the conversion checks).
#
#   docker build -f deploy/docker/prepare.Dockerfile -t craftai-prepare .      (from the repository root)
#
# Build args (docs/DEPLOY.md): BASE_IMAGE (a Debian-like image with python3 >= 3.11 and python3 -m venv),
# WHEELHOUSE (a folder of wheels inside the context: makes the build offline), TORCH_INDEX_URL (where
# torch comes from without a wheelhouse: the CPU build). Written for the legacy builder too
# (testcontainers builds through docker-py): no BuildKit-only syntax.
# The stages up to `project` are the same text in every Dockerfile, so builds share their layers.

ARG BASE_IMAGE=python:3.11-slim-bookworm

# -- runtime: what every stage and the final image start from ------------------------------------
FROM ${BASE_IMAGE} AS runtime
RUN groupadd --system --gid 10001 craftai \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/craftai --create-home --shell /usr/sbin/nologin craftai \
 && mkdir -p /store && chown 10001:10001 /store
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
# prepare and infer-cpu install the same set (the union of theirs: infer-cpu also carries onnx and
# httpx, about 60 MB), so the torch layer is built once and stored once for both images.
FROM wheels AS deps
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN sh /build/install.sh deps craftai "craftai-prepare[convert]" "craftai-infer[onnx-cpu,torch]"

# -- the image ---------------------------------------------------------------------------------------
FROM runtime
COPY --from=deps /opt/craftai /opt/craftai
COPY --from=project /project/ /tmp/project/
RUN /opt/craftai/bin/python -m pip install --no-cache-dir --disable-pip-version-check --no-index --no-deps \
        /tmp/project/craftai-[0-9]*.whl /tmp/project/craftai_wire-*.whl /tmp/project/craftai_common-*.whl /tmp/project/craftai_prepare-*.whl \
        /tmp/project/craftai_models-*.whl \
 && /opt/craftai/bin/python -m pip check \
 && rm -rf /tmp/project
COPY deploy/docker/craftai_setup.py /opt/craftai/bin/craftai-setup
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    XDG_CACHE_HOME=/tmp/.cache \
    CRAFTAI_HOST=0.0.0.0 \
    CRAFTAI_PORT=50051 \
    CRAFTAI_STORE=/store
LABEL org.opencontainers.image.title="craftai-prepare" \
      org.opencontainers.image.description="craft-ai services: prepare (pinned downloads, verification, one-time conversions)" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
WORKDIR /tmp
VOLUME ["/store"]
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "craftai_common.health_probe"]
CMD ["craftai-prepare"]
