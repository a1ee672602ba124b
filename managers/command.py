"""The light part of the SDK: `Command` alone, for a plugin's modules of commands, which
the command line loads every time it starts (managers.sdk brings the whole core)."""

from unet.reconciler.command import Command

__all__ = ["Command"]
