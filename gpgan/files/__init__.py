"""Files handled safely: atomic writes (a crash leaves the old file or the new one), downloads
that are verified before they take their name, the cache folder, ``.npz`` files read without
pickles, unpicklers that admit only named globals, and the lock files that keep one writer to a
folder. Everything above that writes, fetches or
unpickles a file goes through here."""
from gpgan.files.atomic import (append_text, atomic_write, check_folder_path, check_writable_folder_path,
                                describe_os_error, error_text, is_temporary, make_folder, missing_folders,
                                remove_empty_folders, replaced_folder, staged_folder)
from gpgan.files.download import DownloadError, cache_dir, digest, download, store_checked
from gpgan.files.lock import FileLock, LockHeld
from gpgan.files.npz import NpzError, open_npz, read_arrays, read_entry
from gpgan.files.unpickle import RefusedPickle, RestrictedUnpickler

__all__ = ["append_text", "atomic_write", "check_folder_path", "check_writable_folder_path", "describe_os_error",
           "error_text", "is_temporary", "make_folder", "missing_folders", "remove_empty_folders", "replaced_folder",
           "staged_folder",
           "DownloadError", "cache_dir", "digest", "download", "store_checked", "FileLock", "LockHeld",
           "NpzError", "open_npz", "read_arrays", "read_entry",
           "RefusedPickle", "RestrictedUnpickler"]
