"""The one place the version lives: pyproject reads it; tests check package.json agrees."""

__version__ = "0.1.0"
