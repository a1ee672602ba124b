"""A tiny third-party unet backend: each virtual network and subnet as a JSON file.

It proves the manager contract (managers/base.py): a package outside unet, found through
the entry-point group `unet.managers`, validated, planned, applied, checked for drift
and pruned with no change to unet. Everything it knows of unet is that contract and the
backend-neutral objects it renders.

One folder (`spec.config.folder`) is the backend. Each object is one file,
`<key with / as .>.json`, holding the object and its tags; a file of another
installation, or one that is not unet's, is never read as ours nor changed. The lock is
an fcntl lock on `.lock` in the folder; the digest of what was applied is `.applied`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from unet.managers.sdk import (
    WAIT_NOTICE,
    Action,
    Allocations,
    ApplyOutcome,
    BackendLocked,
    BackendObject,
    Capability,
    Change,
    Command,
    Exposure,
    FabricManager,
    Manager,
    ManagerConfig,
    Model,
    Observation,
    ProgressFactory,
    Session,
    Step,
    each_step,
)


class FolderConfig(ManagerConfig):
    folder: str = Field(min_length=1, description="The folder that holds the objects")


class FolderManager(FabricManager):
    name: ClassVar[str] = "folder"
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.IPV4,
                                                               Capability.IPV6})
    Config: ClassVar[type[FolderConfig]] = FolderConfig
    backend_field: ClassVar[str | None] = "folder"
    config: FolderConfig

    def render(self, model: Model, allocations: Allocations) -> list[BackendObject]:
        out = []
        for vn in model.kind("VirtualNetwork"):
            out.append(BackendObject(self.manager, "network", f"network/{vn.tenant}/{vn.name}",
                                     vn.ref, {"name": f"{vn.tenant}.{vn.name}"}))
        for subnet in model.kind("Subnet"):
            vn = subnet.obj.spec.virtual_network
            spaces = model.subnet_spaces(subnet.tenant, subnet.name)
            out.append(BackendObject(
                self.manager, "subnet", f"subnet/{subnet.tenant}/{subnet.name}", subnet.ref,
                {"name": f"{subnet.tenant}.{subnet.name}",
                 "cidrs": [str(spaces[v].net) for v in sorted(spaces)]},
                refs={"network": (f"network/{subnet.tenant}/{vn}",)}))
        return out

    def describe(self, obj: BackendObject) -> str:
        return f"{obj.table} file {obj.fields['name']}"

    def exposure(self, obj: BackendObject, model: Model) -> Exposure | None:
        return None  # it holds no rules: nothing is opened to the outside

    @contextlib.contextmanager
    def connect(self, workdir: Path) -> Iterator[FolderSession]:
        folder = (workdir / self.config.folder).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        yield FolderSession(folder, self.manager, self.installation)


@dataclass
class FolderObservation(Observation):
    foreign: list[str] = field(default_factory=list)  # files that are not this installation's

    def conflicts(self, desired: Sequence[BackendObject]) -> list[str]:
        return [f"{_file(obj.key)} (for {obj.owner}) already exists and is not this "
                "installation's" for obj in desired if _file(obj.key) in self.foreign]

    def unmanaged(self) -> list[str]:
        return list(self.foreign)


class FolderSession(Session):
    def __init__(self, folder: Path, manager: str, installation: str) -> None:
        self.folder = folder
        self.manager = manager
        self.installation = installation

    @contextlib.contextmanager
    def lock(self, timeout: float, waiting: Callable[[str], None]) -> Iterator[None]:
        fd = os.open(self.folder / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            deadline = time.monotonic() + timeout
            told = 0.0
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    now = time.monotonic()
                    if now > deadline:
                        raise BackendLocked(f"the folder {self.folder} is locked by another "
                                            f"run for more than {timeout:g} s") from None
                    if now - told >= WAIT_NOTICE:
                        waiting(f"waiting for the lock of the folder {self.folder}")
                        told = now
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def observe(self) -> FolderObservation:
        objects, foreign = [], []
        for path in sorted(self.folder.glob("*.json")):
            item = json.loads(path.read_text())
            if item.get("installation") != self.installation:
                foreign.append(path.name)
                continue
            objects.append(BackendObject(
                self.manager, item["table"], item["key"], item["owner"], item["fields"],
                {k: tuple(v) for k, v in item["refs"].items()}, None, frozenset(),
                item["meta"]))
        applied = self.folder / f".applied.{self.installation}.{self.manager}"
        digest = applied.read_text() if applied.exists() else None
        return FolderObservation(objects, digest, foreign)

    def apply(self, observation: Observation, waves: Sequence[Sequence[Step]],
              changes: dict[str, Change], progress: ProgressFactory) -> ApplyOutcome:
        outcome = ApplyOutcome()
        for step, obj in each_step(waves, changes, progress):
            path = self.folder / _file(obj.key)
            if step.action is Action.DELETE:
                path.unlink(missing_ok=True)
            else:
                path.write_text(json.dumps({
                    "installation": self.installation, "table": obj.table,
                    "key": obj.key, "owner": obj.owner, "fields": dict(obj.fields),
                    "refs": {k: list(v) for k, v in obj.refs.items()},
                    "meta": dict(obj.meta)}, indent=1, sort_keys=True) + "\n")
            outcome.did(step)
        return outcome

    def record_applied(self, digest: str) -> None:
        (self.folder / f".applied.{self.installation}.{self.manager}").write_text(digest)


def _file(key: str) -> str:
    return key.replace("/", ".") + ".json"


def _list_files(args: argparse.Namespace, managers: Mapping[str, Manager], repo: Path) -> int:
    """`unet folder-files`: each file of the repo's folder managers, one a line."""
    for name, manager in sorted(managers.items()):
        if isinstance(manager, FolderManager):
            folder = repo / manager.config.folder
            for path in sorted(folder.glob("*.json")):
                print(f"{name}: {path.name}")
    return 0


FILES = Command("folder-files", help="list the files of the repo's folder backends",
                description="Each file the folder managers of the repo hold, one a line.",
                arguments=lambda parser: None, run=_list_files)
