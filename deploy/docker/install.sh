#!/bin/sh
# Install step shared by the Dockerfiles (POSIX sh: it runs in the bare base image).
#   install.sh deps PACKAGE[EXTRAS]...   third-party dependencies of those packages into /opt/craftai
#   install.sh wheels                    the seven project packages built as wheels from /src into /project
# A wheelhouse with wheels in it (/wheelhouse, the WHEELHOUSE build arg) makes every step offline
# (--no-index); without one, pip uses its index and torch comes from TORCH_INDEX_URL (CPU or CUDA
# build, never PyPI's default CUDA build by accident). Versions come from constraints.txt either way.
set -eu
pip="/opt/craftai/bin/python -m pip --no-cache-dir --disable-pip-version-check --no-input"
if ls /wheelhouse/*.whl >/dev/null 2>&1; then
    offline="--no-index --find-links /wheelhouse"
else
    offline=""
fi
mode=$1
shift
case "$mode" in
deps)
    python3 /build/requirements.py /build "$@" > /build/requirements.txt
    echo "third-party requirements of $*:"
    sed 's/^/  /' /build/requirements.txt
    # torch, and torchvision where asked (the gpu-jpeg extra), from the PyTorch index of the build
    torch_packages=$(grep -oE '^torch(vision)?\b' /build/requirements.txt | tr '\n' ' ')
    if [ -n "$torch_packages" ] && [ -z "$offline" ]; then
        # shellcheck disable=SC2086
        $pip install -c /build/constraints.txt --index-url "${TORCH_INDEX_URL:?set the TORCH_INDEX_URL build arg}" $torch_packages
    fi
    # shellcheck disable=SC2086
    $pip install $offline -c /build/constraints.txt -r /build/requirements.txt
    ;;
wheels)
    # One build environment for the seven packages (this stage is thrown away) instead of seven
    # isolated ones: the same setuptools, a seventh of the time.
    # shellcheck disable=SC2086
    $pip install $offline --upgrade "setuptools>=69" wheel
    # shellcheck disable=SC2086
    $pip wheel $offline --no-deps --no-build-isolation -w /project \
        /src/clients/wire /src/clients/python /src/services/common /src/services/models /src/services/catalogue /src/services/prepare /src/services/infer
    ;;
*)
    echo "usage: install.sh deps PACKAGE... | install.sh wheels" >&2
    exit 2
    ;;
esac
