"""Exceptions with messages meant for users; the CLI prints them as one line and exits non-zero."""


class EvolveKitError(Exception):
    """Base class of every error the CLI reports without a traceback."""


class ConfigError(EvolveKitError):
    """A configuration file or override is missing, malformed or invalid."""


class LLMError(EvolveKitError):
    """An LLM backend failed in a way the caller should see (bad credentials, unknown model, ...)."""


class EnvError(EvolveKitError):
    """An environment could not be created or used."""
