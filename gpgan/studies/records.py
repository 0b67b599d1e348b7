"""A study's records: the files of its runs that its report reads, without checkpoints, copied into
a folder of their own (small enough to commit, and to outlive the machine the runs were on), from
which ``gpgan-ablate SWEEP --out RECORDS --report-only`` rebuilds the same report anywhere (with
the same matplotlib and Pillow, which draw the figures).

Layout, that of the sweep's output folder::

    RECORDS.md                  what the folder is, its runs, and the command that rebuilds the report
    runs/<config>/<run>/        the run's record files (:meth:`gpgan.train.run.RunFolder.record_files`)
                                and the report's samples: samples/final.png and the samples of the
                                best evaluation
    logs/<run>/failure.json     a failed or diverged run's last error

Kept: the runs that have ended, finished, failed or diverged. An unfinished, interrupted or
not-yet-run one is left out (what it needs is its checkpoints), so a report rebuilt from the
records lists it as not run. A failed or diverged run is listed with its error, not with the
checkpoint it left; a sweep continued from the records retries a failed run from step 0.

:func:`import_records` is the way back: it adds the finished and diverged runs of records written
elsewhere (another machine ran some runs of the sweep, ``gpgan-ablate --only``) to a sweep's
output folder, where those runs have no folder yet, so that the sweep skips them and its report
includes them.
"""
import errno
import os
import shutil

from gpgan.files import atomic_write, make_folder, missing_folders, remove_empty_folders, replaced_folder
from gpgan.studies.results import collect_results
from gpgan.studies.runner import failure_path, find_run_dir, hold_out_dir, read_failure, release_out_dir, run_state
from gpgan.studies.sweep import expand_runs, run_config
from gpgan.train.run import NotARunError, RunFolder

__all__ = ["IMPORTED_STATUSES", "KEPT_STATUSES", "MARKER", "RecordsError", "export_records", "import_records"]

#: The statuses of the runs whose records are kept: those that have ended.
KEPT_STATUSES = ("finished", "failed", "diverged")
#: The statuses of the runs that :func:`import_records` takes: those a sweep would not run again.
IMPORTED_STATUSES = ("finished", "diverged")
#: The file that marks a records folder and says what it is.
MARKER = "RECORDS.md"


class RecordsError(ValueError):
    """A records folder that cannot be written where it was asked for."""


def _inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _written_here(parts, name):
    """Whether an export writes the file ``name`` in the folder ``parts`` (relative, split)."""
    if not parts:
        return name == MARKER
    if parts[0] == "logs":
        return len(parts) == 2 and name == "failure.json"
    if parts[0] == "runs" and len(parts) == 3:
        return RunFolder.is_record_file(name)
    return parts[0] == "runs" and len(parts) == 4 and parts[3] == "samples" and name.endswith(".png")


def _foreign_file(dest):
    """The first file or link under ``dest`` that no export writes (e.g. a checkpoint of a sweep
    that was continued in a copy of the records), or None."""
    for root, dirs, files in os.walk(dest):
        rel = os.path.relpath(root, dest)
        parts = [] if rel == "." else rel.split(os.sep)
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            if os.path.islink(os.path.join(root, name)) or not _written_here(parts, name):
                return os.path.join(root, name)
    return None


def _check_destination(out_dir, dest):
    if os.path.islink(dest):
        raise RecordsError(f"{dest} is a symbolic link; name the folder it points to")
    if _inside(dest, out_dir) or _inside(out_dir, dest):
        raise RecordsError(f"the records folder {dest} and the sweep's output folder {out_dir} overlap; "
                           "name a folder outside it (e.g. experiments/records/<sweep name>)")
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise RecordsError(f"{dest} is a file, not a folder; name a new folder, an empty one, or records "
                           "written before")
    foreign = _foreign_file(dest) if os.path.isdir(dest) else None
    if foreign is not None:
        raise RecordsError(f"{dest} holds {os.path.relpath(foreign, dest)}, which records do not hold, and records "
                           "replace their folder whole; name a new folder, an empty one, or records written before")


def _copy(source, staging, rel, dest):
    """Copy ``source`` to ``staging/rel``; an OSError names the file's place under ``dest``."""
    target = os.path.join(staging, rel)
    try:
        make_folder(os.path.dirname(target))
        shutil.copyfile(source, target)
    except OSError as exc:
        raise OSError(exc.errno or errno.EIO, exc.strerror or str(exc), os.path.join(dest, rel)) from None


def _marker_text(sweep, kept, left_out):
    name = os.path.basename(sweep.path)
    lines = [f"# Records of the sweep {name}", ""]
    if sweep.title:
        lines += [sweep.title, ""]
    lines += ["What the sweep's report reads of each run that has ended (finished, failed or diverged): its "
              "record files, the sample grids the report shows, a failed run's error. No checkpoints. Written "
              "by `gpgan-ablate SWEEP --out OUT --export-records THIS_FOLDER`, which replaces the folder whole. "
              "The report, rebuilt from them:", "",
              f"    gpgan-ablate {name} --out THIS_FOLDER --report-only --report-dir REPORT_DIR",
              "", "| run | status |", "|---|---|"]
    lines += [f"| `{run}` | {status} |" for run, status in kept]
    if left_out:
        lines += ["", f"Left out, still to run or to finish: {', '.join(f'`{n}`' for n in left_out)}."]
    return "\n".join(lines) + "\n"


def export_records(sweep, out_dir, dest):
    """Write the records of ``sweep``'s runs under ``out_dir`` into ``dest`` (replaced whole, all at
    once). Returns ``(kept, left_out)``: ``[(run name, status)]`` of the runs copied and the names of
    those left out, in sweep order.

    Raises:
        RecordsError: ``dest`` is a link, overlaps ``out_dir``, is a file, or holds a file that
            records do not hold.
        OSError: a file could not be read or written (``dest`` is then left as it was).
    """
    out_dir, dest = os.fspath(out_dir), os.fspath(dest)
    _check_destination(out_dir, dest)
    records = collect_results(sweep, out_dir)
    kept = [r for r in records if r.status in KEPT_STATUSES]
    left_out = [r.spec.name for r in records if r.status not in KEPT_STATUSES]
    with replaced_folder(dest) as staging:
        for rec in kept:
            failure = failure_path(out_dir, rec.spec.name)
            if rec.status != "finished" and os.path.isfile(failure):
                _copy(failure, staging, os.path.relpath(failure, out_dir), dest)
            if rec.run_dir is None:
                continue
            folder = os.path.relpath(rec.run_dir, out_dir)
            for path in RunFolder(rec.run_dir).record_files():
                _copy(path, staging, os.path.join(folder, os.path.basename(path)), dest)
            for sample in sorted({rec.sample, rec.best_sample} - {None}):
                _copy(sample, staging, os.path.join(folder, os.path.relpath(sample, rec.run_dir)), dest)
        with open(os.path.join(staging, MARKER), "w", encoding="utf-8") as fh:
            fh.write(_marker_text(sweep, [(r.spec.name, r.status) for r in kept], left_out))
    return [(r.spec.name, r.status) for r in kept], left_out


def _record_status(sweep, records_dir, spec):
    """``(status, run folder)`` of ``spec``'s run in a records folder: "finished", "diverged",
    "failed", "unfinished" (a folder that a sweep continued in holds such runs) or "absent"."""
    run_dir = find_run_dir(records_dir, spec.name)
    if run_dir is not None and RunFolder(run_dir).is_finished():
        return "finished", run_dir
    failure = read_failure(records_dir, spec.name)
    if failure is None or failure[0] == "interrupted":
        return ("absent", None) if run_dir is None and failure is None else ("unfinished", run_dir)
    # (a diverged run counts as one where its folder tells the sweep that it needs no new start)
    diverged = failure[0] == "diverged" and run_dir is not None
    return ("diverged" if diverged else "failed"), run_dir


_PASSED_OVER = {"failed": "failed there; the sweep runs it again",
                "unfinished": "unfinished there (its checkpoints stay there); the sweep runs it here"}


def _refusal(sweep, spec, run_dir):
    """Why the record in ``run_dir`` is no run of ``sweep`` as ``spec`` asks it (its config differs
    beyond the keys that do not change what a run computes, such as the device), or None. A
    folder without a config.yaml (another trainer's, as ``GPGAN_TRAIN_CMD`` may run) is taken as
    the sweep's, as :func:`~gpgan.studies.runner.config_mismatches` takes it."""
    try:
        diffs = RunFolder(run_dir).config_differences(run_config(sweep, spec))
    except NotARunError:
        return None
    except (OSError, ValueError) as exc:
        return f"its config cannot be compared with the sweep's: {exc}"
    if not diffs:
        return None
    shown = "; ".join(f"{key}: {old!r} there, {new!r} in the sweep" for key, old, new in diffs[:3])
    return f"it was made with another config ({shown}{'; ...' if len(diffs) > 3 else ''})"


def import_records(sweep, records_dir, out_dir):
    """Add to ``out_dir`` the finished and diverged runs of ``sweep`` that the records folder
    ``records_dir`` holds (:func:`export_records`, e.g. on another machine) and ``out_dir`` has no
    folder for: each run folder (and a diverged run's failure.json) is copied whole and appears at
    once. The output folder's lock is held meanwhile, as a sweep holds it. Returns ``(imported,
    passed_over)``: the names of the runs copied, and ``[(run name, why)]`` of the records left
    where they are (a failed run, which the sweep runs again; a run with a folder in ``out_dir``
    already), in sweep order.

    Raises:
        RecordsError: ``records_dir`` is no records folder, overlaps ``out_dir``, holds no run of
            the sweep, or holds a run made with another config than the sweep's (nothing is
            copied then).
        OutInUseError: a sweep is running the runs of ``out_dir``.
        OSError: a file could not be read or written (the run being copied is then left out).
    """
    records_dir, out_dir = os.fspath(records_dir), os.fspath(out_dir)
    if not os.path.isfile(os.path.join(records_dir, MARKER)):
        raise RecordsError(f"{records_dir} is not a records folder (it has no {MARKER}); write one with "
                           "gpgan-ablate SWEEP --out OUT --export-records DIR")
    if _inside(records_dir, out_dir) or _inside(out_dir, records_dir):
        raise RecordsError(f"the records folder {records_dir} and the sweep's output folder {out_dir} overlap")
    found = [(spec,) + _record_status(sweep, records_dir, spec) for spec in expand_runs(sweep)]
    found = [item for item in found if item[1] != "absent"]
    if not found:
        raise RecordsError(f"{records_dir} holds no run of {sweep.path} (its runs/ has none of the sweep's run names)")
    refused = [(spec.name, why) for spec, status, run_dir in found
               if status in IMPORTED_STATUSES and (why := _refusal(sweep, spec, run_dir)) is not None]
    if refused:
        raise RecordsError(f"nothing imported: {len(refused)} run(s) of {records_dir} are not the sweep's as "
                           f"{sweep.path} asks them now: " + "; ".join(f"{name}: {why}" for name, why in refused))
    lock, made = hold_out_dir(out_dir)
    imported, passed_over = [], []
    try:
        for spec, status, run_dir in found:
            here = run_state(out_dir, spec.name)[0]
            if status not in IMPORTED_STATUSES:
                passed_over.append((spec.name, _PASSED_OVER[status]))
            elif here != "absent":
                failure = read_failure(out_dir, spec.name)
                what = ("finished" if here == "finished" else "diverged" if failure and failure[0] == "diverged"
                        else "unfinished; remove its folder to take the record's")
                passed_over.append((spec.name, f"it has a folder in {out_dir} already ({what})"))
            else:
                _import_run(records_dir, out_dir, spec.name, run_dir, status)
                imported.append(spec.name)
    finally:
        release_out_dir(lock, made, used=bool(imported))  # an --out made for nothing (a mistyped one) goes
    return imported, passed_over


def _import_run(records_dir, out_dir, name, run_dir, status):
    """Copy one run's record into ``out_dir``: the files an export writes (no checkpoints, no links),
    made whole beside the run folder's place and renamed into it, so that no sweep ever sees a run
    folder half copied (one without final.json would be started afresh); then a diverged run's
    failure.json (the output folder's lock is held meanwhile)."""
    rel_run = os.path.relpath(run_dir, records_dir)
    target = os.path.join(out_dir, rel_run)
    made = missing_folders(target)  # runs/<config>/ (and above), when this run is its first
    make_folder(os.path.dirname(target))
    try:
        with replaced_folder(target) as staging:
            for root, dirs, files in os.walk(run_dir):
                dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
                rel = os.path.relpath(root, run_dir)
                parts = os.path.normpath(os.path.join(rel_run, rel)).split(os.sep)
                for file in sorted(files):
                    source = os.path.join(root, file)
                    if not os.path.islink(source) and _written_here(parts, file):
                        _copy(source, staging, os.path.normpath(os.path.join(rel, file)), target)
    except BaseException:
        remove_empty_folders(made)
        raise
    if status == "diverged":
        with open(failure_path(records_dir, name), "rb") as fh:
            atomic_write(failure_path(out_dir, name), fh.read())
