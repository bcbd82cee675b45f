"""The export package's error."""


class ExportError(RuntimeError):
    """The model cannot be exported faithfully, or the exported copy does not reproduce its scores."""
