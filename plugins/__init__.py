"""Trocket's built-in plugins. Each sub-package is one plugin; plugins never import each other
and meet only through the kernel's hooks and Protocols."""
