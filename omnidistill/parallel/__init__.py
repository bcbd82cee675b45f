"""The device mesh and shardings: one code path from a single CPU to multi-slice pods."""
