"""Run rembg's own code on pictures (a separate process: rembg is a test-only reference).

    NUMBA_DISABLE_JIT=1 U2NET_HOME=DIR python -m craftai_dev.rembg_peer [--model NAME] [--options JSON]... \
        OUT PICTURE...

Writes OUT/<k>/<stem>.png, the mask rembg's `remove(only_mask=True, **options)` gives with its
session of the model NAME (u2netp unless named), which reads DIR/NAME.onnx (rembg looks there before
downloading), for the k-th `--options` (a JSON object, passed as rembg's `-x` passes its extras to
the session: u2net_cloth_seg's `cc`; none given: one set, empty). Masks rembg stacks (several for
one picture) are written as it makes them: an RGBA picture of the grey masks one below the other.
The network's answer to a picture is computed once for all the sets (the same input, the same
answer), so that each further set costs rembg's steps only.
NUMBA_DISABLE_JIT=1 only skips compiling pymatting (alpha matting, imported by rembg but never
called on this path) at import; it changes nothing rembg computes here.

`mattes` runs it from a test: the model's file put in a rembg home of its own, the masks read back.
`Answers` keeps them for a test run, so that suites comparing different routes with rembg on the
same file and picture run rembg once.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parents[4]  # dev/support/src/craftai_dev/rembg_peer.py


def mattes(model: str, file: Path, pictures: Mapping[str, Path], work: Path) -> dict[str, npt.NDArray[np.uint8]]:
    """rembg's `remove(only_mask=True)` of each picture (by name) with its session of `model` reading
    `file`, in a process of its own; `work` is an empty folder for its home and its output."""
    (answers,) = mattes_with(model, file, pictures, work, [{}])
    return answers


class Answers:
    """rembg's masks (`mattes`) kept in `folder` for a test run, shared by the processes that run
    its tests (pytest-xdist's workers): a mask is rembg's answer to the model's file and the
    picture, so each is made once, by the first test that asks, under a lock a file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def mattes(
        self, model: str, file: Path, pictures: Mapping[str, Path], work: Path
    ) -> dict[str, npt.NDArray[np.uint8]]:
        """`mattes(model, file, pictures, work)`, rembg run only on the pictures no test asked
        before with these bytes of `file` and of the picture."""
        from craftai_dev.files import sha256_of

        self.folder.mkdir(parents=True, exist_ok=True)
        kept = self.folder / f"{model}-{sha256_of(file)}"
        done = {name: kept / f"{sha256_of(path)}.npy" for name, path in pictures.items()}
        with (self.folder / f"{kept.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            missing = {name: pictures[name] for name, path in done.items() if not path.exists()}
            if missing:
                kept.mkdir(exist_ok=True)
                for name, matte in mattes(model, file, missing, work).items():
                    partial = done[name].with_suffix(".part")
                    with partial.open("wb") as handle:
                        np.save(handle, matte)
                    partial.replace(done[name])
        return {name: np.load(path) for name, path in done.items()}


def _threads() -> dict[str, str]:
    """rembg's onnxruntime threads (its session reads OMP_NUM_THREADS) as many as the services'
    models get, where the tests give them a number (tests/conftest.py: one a pytest worker when the
    workers fill the cores): two threads a process on two cores busy with two workers wait on each
    other's slices, for the same answers."""
    threads = os.environ.get("CRAFTAI_CPU_THREADS", "0")
    return {"OMP_NUM_THREADS": threads} if threads != "0" and "OMP_NUM_THREADS" not in os.environ else {}


def mattes_with(
    model: str, file: Path, pictures: Mapping[str, Path], work: Path, options: Sequence[Mapping[str, str]]
) -> list[dict[str, npt.NDArray[np.uint8]]]:
    """`mattes` for each set of `options` (passed to rembg's `remove`), in one process: per set,
    each picture's mask by name."""
    from PIL import Image

    home = work / "home"
    home.mkdir(parents=True)
    (home / f"{model}.onnx").symlink_to(file.resolve())  # rembg takes a model already in its home folder
    env = {**os.environ, "U2NET_HOME": str(home), "NUMBA_DISABLE_JIT": "1", **_threads()}
    given = [f"--options={json.dumps(dict(o))}" for o in options]
    command = [sys.executable, "-m", "craftai_dev.rembg_peer", "--model", model, *given, str(work / "out")]
    subprocess.run([*command, *map(str, pictures.values())], env=env, cwd=REPO, check=True, timeout=600)
    return [
        {name: np.asarray(Image.open(work / "out" / str(k) / f"{Path(name).stem}.png")) for name in pictures}
        for k in range(len(options))
    ]


def _answered_once(session: Any) -> None:
    """The session's network answers an input it answered last without running again."""
    inner = session.inner_session
    run = inner.run
    last: dict[str, Any] = {}  # the last input's bytes and its answer

    def once(names: Any, feeds: dict[str, np.ndarray], *args: Any, **kwargs: Any) -> Any:
        key = {k: v.tobytes() for k, v in feeds.items()}
        if last.get("key") != key:
            last.update(key=key, answer=run(names, feeds, *args, **kwargs))
        return last["answer"]

    session.inner_session = types.SimpleNamespace(run=once, get_inputs=inner.get_inputs)


def main(argv: list[str]) -> int:
    from PIL import Image
    from rembg import new_session, remove

    model = "u2netp"
    if argv[:1] == ["--model"]:
        model, argv = argv[1], argv[2:]
    sets: list[dict[str, str]] = []
    while argv[0].startswith("--options="):
        sets.append(json.loads(argv[0].removeprefix("--options=")))
        argv = argv[1:]
    out = Path(argv[0])
    session = new_session(model)
    _answered_once(session)
    for name in argv[1:]:
        for k, options in enumerate(sets or [{}]):
            mask = remove(Image.open(name), session=session, only_mask=True, **options)
            (out / str(k)).mkdir(parents=True, exist_ok=True)
            mask.save(out / str(k) / f"{Path(name).stem}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
