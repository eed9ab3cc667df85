"""Simulator adapters: ``nirbridge.adapters.norse`` and ``nirbridge.adapters.snntorch``.

Each is imported on its own (``from nirbridge.adapters import norse``), so nirbridge
works without the simulators installed.
"""
