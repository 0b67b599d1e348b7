"""Unpickling foreign files without trusting them: a pickle may name any global and so run any
code; :class:`RestrictedUnpickler` resolves only the globals its subclass lists and refuses every
other one with :class:`RefusedPickle`, naming it, before anything runs."""
import pickle

__all__ = ["RefusedPickle", "RestrictedUnpickler"]


class RefusedPickle(pickle.UnpicklingError):
    """A pickle named a global its unpickler does not admit."""


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` admits only :meth:`allowed` globals.

    Subclasses override :meth:`allowed` (``module, name`` -> the object to use, or None) and set
    :attr:`what` (the kind of file, for the refusal's message). Dicts, lists, tuples, strings,
    bytes and numbers need no global.
    """

    #: what the file should hold, e.g. "a CIFAR-10 batch may only contain NumPy arrays"
    what = "this file may name no global"

    def allowed(self, module, name):
        return None

    def find_class(self, module, name):
        found = self.allowed(module, name)
        if found is None:
            raise RefusedPickle(f"refused global '{module}.{name}': {self.what}")
        return found
