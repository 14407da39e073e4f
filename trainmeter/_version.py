"""The one place the version lives; pyproject reads it, the front-end checks it (tests/unit/test_version.py)."""

__version__ = "0.1.0"
