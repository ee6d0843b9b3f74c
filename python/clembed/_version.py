"""The package version: the C header's CLEMBED_VERSION_MAJOR.MINOR.PATCH."""
__version__ = "0.2.0"
