"""Stand-in namespace for ``optimum`` (tests only)."""
