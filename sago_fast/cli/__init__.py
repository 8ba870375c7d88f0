"""The ``sago`` command line: one module per command, the root only assembles."""
