"""rbln-build: declarative builds of compiled LLM artifact matrices for Rebellions NPUs."""

__version__ = "0.2.0"
