"""Developer tools run from a checkout (not shipped with the package)."""
