"""The benchmark and its synthetic repos: tooling of this repository, not shipped with unet."""
