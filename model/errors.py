"""The errors the model raises, one class per kind of bad input; each message says what is wrong.

A leaf: every layer of model/ may raise these, and the app catches them by class to show the
message in the page.
"""


class ConfigError(ValueError):
    """A config value is missing, out of range or inconsistent; the message names the field."""


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded; the message names the file and the tensor."""


class InputError(ValueError):
    """Bad input to the model (empty, out-of-range ids, too long); the message says what is wrong."""


class ImageError(ValueError):
    """An image cannot be used; the message says why and what would work."""


class CacheError(RuntimeError):
    """An operation the cache cannot honour (e.g. a rollback beyond its slack)."""
