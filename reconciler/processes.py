"""Processes unet starts or waits for (servers, daemons), seen through /proc."""

from __future__ import annotations


def process_alive(pid: int) -> bool:
    """True while the process runs; a zombie (exited, not yet reaped) counts as stopped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
