"""The API version this package wraps (the header's VC_VERSION_MAJOR.MINOR.PATCH), written
once: pyproject.toml reads it, and a test compares it with include/voicecat.h."""

__version__ = "0.3.0"
