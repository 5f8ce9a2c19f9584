"""Fixtures shared by every suite: real files, real servers on loopback."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from craftai_dev import catalogues, servers
from craftai_dev.files import U2NETP_SHA256, sample_photo, u2netp_onnx

# OpenMP threads (torch's CPU ops, in this process, the servers and tools/bench, which inherit it)
# sleep as soon as they wait instead of spinning first: on a 2-core machine with more runnable
# threads than cores (two pytest workers, the servers they start, other work beside them) the
# spinning took most of the CPU (60 3x3 convolutions on 32x32, 20 times: 19 s spinning, 0.4 s with
# PASSIVE, same results). Set before anything here imports torch; tools/test.sh exports it too.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Under pytest-xdist with a worker per core (tools/test.sh), each worker's models, and those of the
# servers it starts, run on one thread: two of them are at work at once most of the time, and models
# of two threads each on two cores wait for each other's slices at every parallel step.
ONE_THREAD = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) >= (os.cpu_count() or 1) > 1
if ONE_THREAD:
    os.environ.setdefault("CRAFTAI_CPU_THREADS", "1")

if TYPE_CHECKING:
    import onnx
    import torch

    from craftai_dev.sam_fixture import Sam21Fixture
    from craftai_dev.segment import Embeddings, SetUpStore


def pytest_configure(config: pytest.Config) -> None:
    """App keys as on a fresh machine, but in a folder of the test run's own (never the user's
    ~/.config/craftai): the local key is made now, so tests that build gRPC metadata by hand can
    read it (servers.app_metadata), and every server and SDK client started by the tests uses it."""
    if servers.CONFIG_VARIABLE not in os.environ:
        folder = Path(tempfile.mkdtemp(prefix="craftai-test-config-"))
        os.environ[servers.CONFIG_VARIABLE] = str(folder)
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    servers.ensure_local_key()
    if ONE_THREAD:
        import torch

        torch.set_num_threads(1)


# The container suite runs after the integration suite: tools/test.sh builds the images beside
# the tests, and they are ready by then (tests/containers/conftest.py waits for them otherwise).
SUITE_ORDER = ("bench", "gpu", "integration", "web", "containers", "parity", "unit")


def _suite_rank(item: pytest.Item, root: Path) -> int:
    parts = item.path.relative_to(root).parts
    suite = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests run on the lent GPU machine only; CI has no GPU and says so.

    Suites run in SUITE_ORDER (files and tests within a suite keep their order). Under pytest-xdist's
    `--dist loadgroup` (tools/test.sh), each test module is one unit of work, so that its
    module-scoped servers start once, on one worker, and the container suite is one unit (its
    session-scoped stack, network and store volume exist once), and so is the web suite (its one
    set of services, gateway and browser serve the API's and the page's tests)."""
    root = config.rootpath
    items.sort(key=lambda item: _suite_rank(item, root))  # stable: the order within a suite stays
    # pytest-xdist's workers, which collect, see `--dist` as "no" and the choice as `option.loadgroup`
    if config.getoption("dist", "no") == "loadgroup" or getattr(config.option, "loadgroup", False):
        for item in items:
            path = item.path.relative_to(root)
            whole = path.parts[:2] in (("tests", "containers"), ("tests", "web"))
            group = "/".join(path.parts[:2]) if whole else path.as_posix()
            item.add_marker(pytest.mark.xdist_group(group))
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine: see docs/PERFORMANCE.md)")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """A worker whose tests lost their groups would split modules between workers and start their
    servers twice: the run stops, rather than going on slower."""
    if node.config.getoption("dist", "no") != "loadgroup":
        return
    ungrouped = [nodeid for nodeid in ids if "@" not in nodeid]
    if ungrouped:
        pytest.exit(
            f"pytest-xdist's --dist loadgroup dropped the groups of {len(ungrouped)} tests (first: {ungrouped[0]}):"
            " this pytest and pytest-xdist do not work together; install the versions of requirements-dev.txt",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


@pytest.fixture(scope="session")
def u2netp_file() -> Path:
    """The real, published u2netp.onnx (from its byte-identical PyPI mirror)."""
    return u2netp_onnx()


@pytest.fixture(scope="session")
def photos() -> dict[str, Path]:
    return {name: sample_photo(name) for name in ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg")}


@pytest.fixture(scope="session")
def model_files(u2netp_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.FileServer]:
    """A real HTTP server on loopback: /good/u2netp.onnx (the real bytes), /bad/ (same size, other
    bytes), /short/ (truncated), /slow/ (the real bytes, after a second) and /drip/ (the real
    bytes, 64 KiB every 50 ms)."""
    root = tmp_path_factory.mktemp("model-files")
    (root / "good").mkdir()
    shutil.copyfile(u2netp_file, root / "good" / "u2netp.onnx")
    data = bytearray(u2netp_file.read_bytes())
    data[1000:1010] = b"0123456789"
    (root / "bad").mkdir()
    (root / "bad" / "u2netp.onnx").write_bytes(bytes(data))
    for folder in ("slow", "drip"):
        (root / folder).mkdir()
        shutil.copyfile(u2netp_file, root / folder / "u2netp.onnx")
    (root / "short").mkdir()
    (root / "short" / "u2netp.onnx").write_bytes(bytes(data[: len(data) // 2]))
    with servers.FileServer(root) as server:
        yield server


@pytest.fixture(scope="session")
def local_catalogue(model_files: servers.FileServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real recipe data, with u2netp fetched from the loopback HTTP server."""
    path = tmp_path_factory.mktemp("catalogue") / "recipes.toml"
    return catalogues.with_sources(path, "u2netp", [{"url": f"{model_files.url}/good/u2netp.onnx"}])


@pytest.fixture(scope="session")
def matte_server(local_catalogue: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Process]:
    """`craftai serve` with u2netp set up through its prepare service (loopback source), and its
    Prometheus metrics on a port of their own."""
    from craftai import AiClient

    workdir = tmp_path_factory.mktemp("matte-server")
    env = {"CRAFTAI_RECIPES": str(local_catalogue), "CRAFTAI_METRICS_PORT": str(servers.free_port())}
    process = servers.embedded(workdir / "store", workdir, env)
    with servers.running(process):
        with AiClient(app_id="tests", target=process.address) as ai:
            events = list(ai.setup("image.matte", "u2netp"))
        assert events[-1].files[0].sha256 == U2NETP_SHA256  # type: ignore[union-attr]
        yield process


@pytest.fixture(scope="session")
def sam21_files() -> Sam21Fixture:
    """SAM 2.1 tiny with random weights: encoder.onnx, decoder.onnx and weights.safetensors, exported
    once and cached under .cache/fixtures/ by a key of the generator's inputs (craftai_dev.sam21)."""
    from craftai_dev import sam_fixture  # imports torch: only for the suites that use SAM

    return sam_fixture.fixture()


@pytest.fixture(scope="session")
def sam_store(sam21_files: Sam21Fixture, tmp_path_factory: pytest.TempPathFactory) -> SetUpStore:
    """A store where the real prepare service set up sam2-hiera-tiny (the fixture, pinned by a test
    catalogue, downloaded from a loopback HTTP server); each segment suite serves it its own way.

    Under pytest-xdist the set-up is made once for the run, by the first worker that needs it, in
    the folder the workers of this run share; each worker serves a copy of its own."""
    from craftai_dev import segment

    return _once_per_run(
        "sam-store",
        tmp_path_factory.mktemp("sam-store"),
        tmp_path_factory,
        lambda f: segment.set_up_store(f, sam21_files),
    )


@pytest.fixture(scope="session")
def sam_torch_store(sam_store: SetUpStore, tmp_path_factory: pytest.TempPathFactory) -> SetUpStore:
    """`sam_store` with the default recipe's torch route set up too (its one-time conversion by the
    real prepare service), for the suites that run both engines side by side: the conversion is made
    once a run rather than by each of them. A session opened without an engine still gets
    onnxruntime's route on the CPU (the recipe's advice)."""
    from craftai import AiClient
    from craftai_dev import segment

    def make(folder: Path) -> SetUpStore:
        assert sam_store.files is not None
        for path, name in ((sam_store.store, "store"), (sam_store.files, "sam-files")):
            shutil.copytree(path, folder / name, symlinks=True)
        made = segment.SetUpStore(folder / "store", Path(shutil.copy(sam_store.recipes, folder)), folder / "sam-files")
        with servers.running(made.serve(folder / "setup")) as process, AiClient("tests", target=process.address) as ai:
            list(ai.setup("image.segment", engine="torch"))
        return made

    return _once_per_run("sam-torch-store", tmp_path_factory.mktemp("sam-torch-store"), tmp_path_factory, make)


@pytest.fixture(scope="session")
def sam_onnx_embeddings(tmp_path_factory: pytest.TempPathFactory) -> Embeddings:
    """The onnxruntime runner's SAM embeddings, each made once a run (craftai_dev.segment.Embeddings):
    suites that hold an answer to the runner's on the same photo share its encoder run. Under
    pytest-xdist in the folder the workers of this run share."""
    from craftai_dev import segment

    if "PYTEST_XDIST_WORKER" in os.environ:
        return segment.Embeddings(tmp_path_factory.getbasetemp().parent / "sam-onnx-embeddings")
    return segment.Embeddings(tmp_path_factory.mktemp("sam-onnx-embeddings"))


def _once_per_run(
    name: str, root: Path, tmp_path_factory: pytest.TempPathFactory, make: Callable[[Path], SetUpStore]
) -> SetUpStore:
    """`make(folder)` in `root`; under pytest-xdist once for the run, by the first worker that needs
    it, in a folder `name` the workers of this run share (a lock beside it), then copied for each
    worker."""
    from craftai_dev import segment

    if "PYTEST_XDIST_WORKER" not in os.environ:
        return make(root)
    shared = tmp_path_factory.getbasetemp().parent / name  # this run's, all workers'
    with (shared.parent / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (shared / "made").exists():
            shutil.rmtree(shared, ignore_errors=True)  # a worker that failed half-way
            shared.mkdir()
            made = make(shared)
            assert made.files is not None
            (shared / "made").write_text(json.dumps([str(made.store), str(made.recipes), str(made.files)]))
    store, recipes, files = (Path(p).relative_to(shared) for p in json.loads((shared / "made").read_text()))
    shutil.copytree(shared, root, symlinks=True, dirs_exist_ok=True)
    return segment.SetUpStore(root / store, root / recipes, root / files)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One intra-op thread for a module of small torch ops: on a shared 2-core machine, two OpenMP
    threads wait on each other for most of u2netp's ~230 small ops (a 32x32 forward took 1.9 s
    instead of 0.15 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def u2netp_published() -> onnx.ModelProto:
    """The published u2netp graph (the real file)."""
    import onnx

    return onnx.load(str(u2netp_onnx()))


@pytest.fixture(scope="module")
def u2netp_converted(u2netp_published: onnx.ModelProto) -> dict[str, torch.Tensor]:
    """u2netp's weights as the prepare service's converter makes them from the published graph."""
    from craftai_prepare.converters import u2netp as converter

    return converter.convert(u2netp_published)
