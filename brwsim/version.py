"""The version of brwsim (one place: the package, the CLI and file provenance read it)."""

__version__ = "0.1.0"
