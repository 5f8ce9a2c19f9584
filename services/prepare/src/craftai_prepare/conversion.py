"""The one-time conversion into the prepared cache: uncancellable, self-verifying, atomic.

A converter writes its outputs into a fresh folder under tmp/, after checking them against the
source ONNX through onnxruntime on a fixed probe (it raises ConversionError when they disagree).
Then every output is hashed into a manifest, synced, and the folder is renamed into
`prepared/<folder>/<key>/` in one step: a crash at any point leaves either no prepared folder or a
complete one. The key is the converter's revision plus the source hashes (craftai_common.store).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import os
import shutil
import time
import uuid
from pathlib import Path

import grpc

from craftai_common.catalogue_client import pins_of
from craftai_common.errors import ServiceError, failed_precondition
from craftai_common.hashing import sha256_file
from craftai_common.store import (
    MANIFEST,
    Manifest,
    OutputRecord,
    Store,
    check_prepared,
    fsync_dir,
)
from craftai_prepare.converters import ConversionError, Converter
from craftai_prepare.full_disk import no_space
from craftai_prepare.reporter import Reporter
from craftai_wire.v1 import catalogue_pb2
from craftai_wire.vocabulary import NoticeCode, Reason


def converters() -> dict[str, Converter]:
    """Known conversions by revision. Imports are lazy: torch and onnx load only to convert."""
    from craftai_prepare.converters import sam21, u2netp

    return {c.revision: c for c in (u2netp.CONVERTER, sam21.CONVERTER)}


def made_with() -> dict[str, str]:
    versions = {}
    for dist in ("torch", "onnx", "onnxruntime", "safetensors"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    return versions


def ensure_prepared(store: Store, resolved: catalogue_pb2.ResolveRouteResponse, reporter: Reporter) -> str | None:
    """Prepare the route unless a complete folder for its key is there. Returns the key prepared now."""
    route, recipe = resolved.route, resolved.recipe
    pins = pins_of(recipe)
    key, target = store.prepared_place(resolved.chosen.revision, pins)
    problem = check_prepared(target, key, pins, deep=True)
    if problem is None:
        return None
    if target.exists():
        reporter.notice(
            NoticeCode.PREPARED_REFUSED, f"refused the prepared folder {target.name}: {problem}; preparing again"
        )
        _remove(target, store)
    converter = converters().get(resolved.chosen.revision)
    if converter is None:
        raise failed_precondition(
            Reason.PREPARATION_FAILED,
            f"this prepare service has no converter {resolved.chosen.revision!r} for {route.recipe} "
            f"({route.engine}); it knows: {', '.join(sorted(converters())) or 'none'} "
            "(the catalogue and prepare versions disagree)",
        )
    for stale in store.tmp.glob(f"prepare-{key}-*"):  # left by a job that was killed; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    work = store.tmp / f"prepare-{key}-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    done = 0

    def step(message: str) -> None:
        nonlocal done
        reporter.progress("convert", done, converter.steps, "steps", message, force=True)
        done = min(done + 1, converter.steps)

    try:
        sources = {spec.role or spec.name: store.model_path(pin) for spec, pin in zip(recipe.files, pins, strict=True)}
        verification = converter.run(sources, work, step)
        reporter.progress("convert", converter.steps, converter.steps, "steps", "writing the manifest", force=True)
        outputs = {}
        for path in sorted(work.iterdir()):
            _fsync(path)
            outputs[path.name] = OutputRecord(path.stat().st_size, sha256_file(path))
        manifest = Manifest(
            key=key,
            revision=resolved.chosen.revision,
            sources={p.name: p.sha256 for p in pins},
            outputs=outputs,
            made_with=made_with(),
            verification=verification,
            created_at=time.time(),
        )
        (work / MANIFEST).write_text(manifest.to_json())
        _fsync(work / MANIFEST)
        fsync_dir(work)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(work, target)
        fsync_dir(target.parent)
    except ConversionError as exc:
        raise ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            Reason.PREPARATION_FAILED,
            f"the preparation of {route.recipe} ({route.engine}) failed its check and published nothing: {exc}",
        ) from exc
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise no_space(store, f"preparing {route.recipe} ({route.engine})") from exc
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return key


def _fsync(path: Path) -> None:
    """Make a written file durable before the folder that holds it is renamed into place."""
    with path.open("rb") as f:
        os.fsync(f.fileno())


def _remove(folder: Path, store: Store) -> None:
    """Move a refused folder out of prepared/ in one step, then delete it."""
    trash = store.tmp / f"refused-{folder.name}-{uuid.uuid4().hex[:8]}"
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)
