# The one way the bootstrap and the reference installs put packages into .venv (sourced, not run):
# `install ARGS...` takes pip's install arguments, always with the project's constraints.txt.
#
# uv (https://docs.astral.sh/uv/, installed into .venv from PyPI first) does the installs where it
# can be had: the same packages from the same places as pip (tools/pip_sources.py reads this
# machine's pip configuration for it), several times faster (docs/figures/2026-12-05-ci-times.md).
# CRAFTAI_INSTALLER=pip keeps pip; so does a machine where uv cannot be installed (it says so).
# Neither byte-compiles: bootstrap.sh compiles once at the end, on every core.

# This machine's pip configuration lists index folders that may not exist; pip says so per package.
noise="is ignored: it is neither a file nor a directory"
quiet() { "$@" > >(grep -v "$noise") 2> >(grep -v "$noise" >&2); }
pip_install=(.venv/bin/python -m pip install --disable-pip-version-check -q --no-compile -c constraints.txt)
installer=${CRAFTAI_INSTALLER:-uv}
if [ "$installer" = uv ] && [ ! -x .venv/bin/uv ] && ! quiet "${pip_install[@]}" uv; then
    echo "uv could not be installed into .venv: pip does the installs (slower)" >&2
    installer=pip
fi
if [ "$installer" = uv ]; then
    mapfile -t uv_sources < <(.venv/bin/python tools/pip_sources.py)
    uv_cert=$(.venv/bin/python tools/pip_sources.py cert)
    install() {
        SSL_CERT_FILE=${SSL_CERT_FILE:-$uv_cert} .venv/bin/uv pip install --python .venv/bin/python -q --no-progress \
            -c constraints.txt "${uv_sources[@]}" "$@"
    }
else
    install() { quiet "${pip_install[@]}" "$@"; }
fi
