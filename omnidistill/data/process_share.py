"""Which rows of a global batch a process owns: one contiguous share, by the same arithmetic for the
on-the-fly slice, the token cache's reader and packed rows (so all agree for any process count)."""

from __future__ import annotations


def process_rows(global_batch: int, process_index: int, process_count: int) -> slice:
    """The rows of a ``global_batch``-row batch that process ``process_index`` of ``process_count`` holds."""
    if not 0 <= process_index < process_count:
        raise ValueError(f"process {process_index} is not one of {process_count} processes")
    if global_batch % process_count:
        raise ValueError(f"global batch of {global_batch} rows does not split over {process_count} processes")
    per = global_batch // process_count
    return slice(process_index * per, (process_index + 1) * per)
