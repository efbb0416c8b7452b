"""The benchmark fleet: one driver, Ray actors pinned to each system, one performance database.

``plan`` is pure (corpus x systems minus what is stored); ``worker`` runs on a system;
``systems`` speaks to Ray (connect, find nodes, pin actors); ``driver`` runs a fleet;
``status`` reports what each system still lacks. Only ``systems``, ``driver`` and the CLI
import Ray, so the single-machine path works where Ray is not installed.
"""
