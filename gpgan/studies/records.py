"""A study's records: the files of its runs that its report reads, without checkpoints, copied into
a folder of their own (small enough to commit, and to outlive the machine the runs were on), from
which ``gpgan-ablate SWEEP --out RECORDS --report-only`` rebuilds the same report anywhere.

Layout, that of the sweep's output folder::

    RECORDS.md                  what the folder is, its runs, and the command that rebuilds the report
    runs/<config>/<run>/        the run's record (:meth:`gpgan.train.run.RunFolder.record_files`:
                                config.yaml, manifest.json, metrics.jsonl, final.json,
                                eval_<step>.json) and the report's samples: samples/final.png and
                                the samples of the best evaluation
    logs/<run>/failure.json     a failed or diverged run's last error

Only runs that will not change are kept: finished, failed and diverged ones. An unfinished,
interrupted or not-yet-run one is left out (what it needs is its checkpoints), so a report rebuilt
from the records lists it as not run. A failed or diverged run is listed with its error, not with
the checkpoint it left.
"""
import os
import shutil

from gpgan.files import make_folder, replaced_folder
from gpgan.studies.results import collect_results
from gpgan.studies.runner import logs_dir
from gpgan.train.run import RunFolder

__all__ = ["KEPT_STATUSES", "MARKER", "RecordsError", "export_records"]

#: The statuses of the runs whose records are kept: those a sweep will not run again.
KEPT_STATUSES = ("finished", "failed", "diverged")
#: The file that marks a records folder (and says what it is); a folder with other files and
#: without it is not replaced.
MARKER = "RECORDS.md"


class RecordsError(ValueError):
    """A records folder that cannot be written where it was asked for."""


def _inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _check_destination(out_dir, dest):
    if _inside(dest, out_dir) or _inside(out_dir, dest):
        raise RecordsError(f"the records folder {dest} and the sweep's output folder {out_dir} overlap; "
                           "name a folder outside it (e.g. experiments/records/<sweep name>)")
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise RecordsError(f"{dest} is a file, not a folder; name a new folder, an empty one, or records "
                           "written before")
    if os.path.isdir(dest) and os.listdir(dest) and not os.path.isfile(os.path.join(dest, MARKER)):
        raise RecordsError(f"{dest} holds other files and no {MARKER}; records replace their folder whole, so "
                           "name a new folder, an empty one, or records written before")


def _copy(source, target):
    make_folder(os.path.dirname(target))
    shutil.copyfile(source, target)


def _marker_text(sweep, kept, left_out):
    lines = [f"# Records of the sweep {os.path.basename(sweep.path)}", ""]
    if sweep.title:
        lines += [sweep.title, ""]
    lines += ["The files of the sweep's finished, failed and diverged runs that its report reads: each run's "
              "config.yaml, manifest.json, metrics.jsonl, final.json and gpgan-eval's eval_<step>.json, the "
              "sample grids the report shows, and a failed run's logs/<run>/failure.json. No checkpoints: these "
              "runs cannot be resumed from here. Written by `gpgan-ablate SWEEP --out OUT --export-records "
              "THIS_FOLDER`, which replaces the folder whole. The report, rebuilt from them:", "",
              f"    gpgan-ablate {os.path.basename(sweep.path)} --out THIS_FOLDER --report-only --report-dir REPORT_DIR",
              "", "| run | status |", "|---|---|"]
    lines += [f"| `{name}` | {status} |" for name, status in kept]
    if left_out:
        lines += ["", f"Left out, still to run or to finish: {', '.join(f'`{n}`' for n in left_out)}."]
    return "\n".join(lines) + "\n"


def export_records(sweep, out_dir, dest):
    """Write the records of ``sweep``'s runs under ``out_dir`` into ``dest`` (replaced whole, all at
    once). Returns ``(kept, left_out)``: ``[(run name, status)]`` of the runs copied and the names of
    those left out, in sweep order.

    Raises:
        RecordsError: ``dest`` overlaps ``out_dir``, is a file, or is a folder with other files
            and no RECORDS.md.
        OSError: a file could not be read or written (``dest`` is then left as it was).
    """
    out_dir, dest = os.fspath(out_dir), os.fspath(dest)
    _check_destination(out_dir, dest)
    records = collect_results(sweep, out_dir)
    kept = [r for r in records if r.status in KEPT_STATUSES]
    left_out = [r.spec.name for r in records if r.status not in KEPT_STATUSES]
    with replaced_folder(dest) as staging:
        for rec in kept:
            failure = os.path.join(logs_dir(out_dir, rec.spec.name), "failure.json")
            if rec.status != "finished" and os.path.isfile(failure):
                _copy(failure, os.path.join(logs_dir(staging, rec.spec.name), "failure.json"))
            if rec.run_dir is None:
                continue
            target = os.path.join(staging, os.path.relpath(rec.run_dir, out_dir))
            for path in RunFolder(rec.run_dir).record_files():
                _copy(path, os.path.join(target, os.path.basename(path)))
            for sample in {rec.sample, rec.best_sample} - {None}:
                _copy(sample, os.path.join(target, os.path.relpath(sample, rec.run_dir)))
        with open(os.path.join(staging, MARKER), "w", encoding="utf-8") as fh:
            fh.write(_marker_text(sweep, [(r.spec.name, r.status) for r in kept], left_out))
    return [(r.spec.name, r.status) for r in kept], left_out
