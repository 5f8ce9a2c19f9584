"""The one-time conversion into the prepared cache: uncancellable, self-verifying, atomic.

A converter writes its outputs into a fresh folder under tmp/, after checking them against the
source ONNX through onnxruntime on a fixed probe (it raises ConversionError when they disagree).
Then every output is hashed into a manifest, synced, and the folder is renamed into
`prepared/<folder>/<key>/` in one step: a crash at any point leaves either no prepared folder or a
complete one. The key is the converter's revision plus the source hashes (craftai_common.store).

A route may also be checked against files of the recipe's other routes when they are on disk
(`checked_against` in the recipe data; BiRefNet's torch route against the published ONNX): those
used are recorded in the manifest, and what could not be checked said there (the route's status
shows it). A route prepared without such a file is prepared again by the next setup that finds it
on disk, so that the check is made; a folder that fails it is gone.
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

from craftai_common.catalogue_client import check_hint, pins_of
from craftai_common.errors import ServiceError, failed_precondition
from craftai_common.hashing import sha256_file
from craftai_common.store import (
    MANIFEST,
    FilePin,
    Manifest,
    OutputRecord,
    Store,
    check_prepared,
    fsync_dir,
    read_manifest,
)
from craftai_prepare.converters import ConversionError, Converter, Inputs
from craftai_prepare.full_disk import no_space
from craftai_prepare.reporter import Reporter
from craftai_wire.v1 import catalogue_pb2
from craftai_wire.vocabulary import NoticeCode, Reason


def converters() -> dict[str, Converter]:
    """Known conversions by revision. Imports are lazy: torch and onnx load only to convert."""
    from craftai_prepare.converters import birefnet, isnet, sam21, sam21_decoder, u2netp

    return {
        c.revision: c
        for c in (
            u2netp.CONVERTER,
            u2netp.CONVERTER_FULL,
            isnet.CONVERTER,
            isnet.CONVERTER_ANIME,
            sam21.CONVERTER,
            sam21_decoder.CONVERTER,
            birefnet.CONVERTER,
        )
    }


def made_with() -> dict[str, str]:
    versions = {}
    for dist in ("torch", "onnx", "onnxruntime", "safetensors"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    return versions


def ensure_prepared(
    store: Store, resolved: catalogue_pb2.ResolveRouteResponse, reporter: Reporter, *, memory_limit_bytes: int = 0
) -> str | None:
    """Prepare the route unless a complete folder for its key is there (its self-checks sized against
    `memory_limit_bytes`, 0: the cgroup's or the machine's memory). Returns the key prepared now."""
    route, recipe = resolved.route, resolved.recipe
    pins = pins_of(recipe)
    key, target = store.prepared_place(resolved.chosen.revision, pins)
    problem = check_prepared(target, key, pins, deep=True)
    references = [(spec, _pin(spec)) for spec in resolved.checked_against]
    on_disk = [(spec, pin) for spec, pin in references if store.check_by_record(pin).verified]
    settings = settings_of(recipe)
    if problem is None:
        manifest = read_manifest(target)
        unchecked = [pin.name for _, pin in on_disk if manifest is None or pin.name not in manifest.checked_against]
        if manifest is not None and manifest.settings != settings:
            reporter.notice(
                NoticeCode.PREPARED_REFUSED,
                f"the prepared folder {target.name} was made with other settings of its files "
                f"({manifest.settings}, the recipe's are {settings}): preparing again",
            )
        elif not unchecked:
            return None
        else:
            reporter.notice(
                NoticeCode.PREPARED_REFUSED,
                f"{', '.join(unchecked)} is on disk now, and the prepared folder {target.name} was not checked "
                "against it: preparing again to check it",
            )
        _remove(target, store)
    elif target.exists():
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
        used = [(spec, pin) for spec, pin in on_disk if store.check_by_hash(pin).verified]
        inputs = Inputs(
            sources={
                spec.role or spec.name: store.model_path(pin) for spec, pin in zip(recipe.files, pins, strict=True)
            },
            settings={spec.role or spec.name: dict(spec.settings) for spec in recipe.files},
            references={spec.role or spec.name: store.model_path(pin) for spec, pin in used},
            checks=tuple(spec.name for spec in resolved.checked_against),
            memory_limit_bytes=memory_limit_bytes,
        )
        outcome = converter.run(inputs, work, step)
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
            verification=outcome.verification,
            created_at=time.time(),
            checked_against={pin.name: pin.sha256 for _, pin in used},
            unverified=outcome.unverified,
            settings=settings,
        )
        (work / MANIFEST).write_text(manifest.to_json())
        _fsync(work / MANIFEST)
        fsync_dir(work)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(work, target)
        fsync_dir(target.parent)
        if outcome.unverified:
            missing = [spec for spec, _ in references if spec.name not in {pin.name for _, pin in used}]
            hint = check_hint(route, [s.name for s in missing], [e for s in missing for e in s.engines])
            reporter.notice(
                NoticeCode.PREPARED_UNVERIFIED,
                f"{route.recipe} ({route.engine}): {outcome.unverified}" + (f" ({hint})" if missing else ""),
            )
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


def settings_of(recipe: catalogue_pb2.Recipe) -> dict[str, dict[str, str]]:
    """The recipe's settings of a route's files, by file name (those that have any)."""
    return {f.name: dict(f.settings) for f in recipe.files if f.settings}


def _pin(spec: catalogue_pb2.PinnedFile) -> FilePin:
    return FilePin(spec.folder, spec.name, spec.size, spec.sha256)


def _fsync(path: Path) -> None:
    """Make a written file durable before the folder that holds it is renamed into place."""
    with path.open("rb") as f:
        os.fsync(f.fileno())


def _remove(folder: Path, store: Store) -> None:
    """Move a refused folder out of prepared/ in one step, then delete it."""
    trash = store.tmp / f"refused-{folder.name}-{uuid.uuid4().hex[:8]}"
    os.rename(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)
