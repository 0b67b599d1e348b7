"""Files handled safely: atomic writes (a crash leaves the old file or the new one), downloads
that are verified before they take their name, the cache folder, and unpicklers that admit only
named globals. Everything above that writes, fetches or unpickles a file goes through here."""
from gpgan.files.atomic import atomic_write, is_temporary
from gpgan.files.download import DownloadError, cache_dir, digest, download, store_checked
from gpgan.files.unpickle import RefusedPickle, RestrictedUnpickler

__all__ = ["atomic_write", "is_temporary", "DownloadError", "cache_dir", "digest", "download", "store_checked",
           "RefusedPickle", "RestrictedUnpickler"]
