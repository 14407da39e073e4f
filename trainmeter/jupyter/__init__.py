"""Notebook surface: the extension, the magics, the widget and its bridge to the supervisor."""
