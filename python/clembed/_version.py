"""The package version: the C header's CLEMBED_VERSION_MAJOR.MINOR.PATCH (tests/version.cmake checks)."""
__version__ = "0.4.0"
