"""A backend unet does not ship, added with no change to unet: the manager contract holds.

The plugin (tests/support/folder_backend/) keeps each virtual network and subnet as a
JSON file in a folder. It is registered the way installing its package registers it: a
`.dist-info` folder with its entry point, on the path of the `unet` that runs.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "support" / "folder_backend"

REPO = {
    "unet.yaml": """
apiVersion: network.osac.io/v1alpha1
kind: RepositoryConfig
metadata: {name: files}
spec: {installation: files, prune: true}
""",
    "provider/managers.yaml": """
apiVersion: network.osac.io/v1alpha1
kind: NetworkManager
metadata: {name: files}
spec:
  role: fabric
  plugin: folder
  regions: [region-a]
  config: {folder: backend}
---
apiVersion: network.osac.io/v1alpha1
kind: NetworkClass
metadata: {name: plain}
spec: {region: region-a, default: true, fabricManager: files}
""",
    "provider/tenants/acme.yaml": """
apiVersion: network.osac.io/v1alpha1
kind: Tenant
metadata: {name: acme}
spec: {regions: [region-a]}
""",
    "tenants/acme/network.yaml": """
apiVersion: network.osac.io/v1alpha1
kind: VirtualNetwork
metadata: {name: prod}
spec: {region: region-a, ipv4Cidr: 10.10.0.0/16}
---
apiVersion: network.osac.io/v1alpha1
kind: Subnet
metadata: {name: web}
spec: {virtualNetwork: prod, ipv4Cidr: 10.10.1.0/24, dhcp: false}
---
apiVersion: network.osac.io/v1alpha1
kind: Subnet
metadata: {name: db}
spec: {virtualNetwork: prod, ipv4Cidr: 10.10.2.0/24, dhcp: false}
""",
}


@pytest.fixture
def installed(tmp_path: Path) -> Path:
    """A site folder holding the plugin as an installer leaves it: code and dist-info."""
    site = tmp_path / "site"
    (site / "unet_folder_backend").mkdir(parents=True)
    source = PLUGIN / "unet_folder_backend" / "__init__.py"
    (site / "unet_folder_backend" / "__init__.py").write_text(source.read_text())
    info = site / "unet_folder_backend-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: unet-folder-backend\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[unet.managers]\nfolder = unet_folder_backend:FolderManager\n\n"
        "[unet.commands]\nfolder-files = unet_folder_backend:FILES\n")
    return site


@pytest.fixture
def work(tmp_path: Path) -> Path:
    repo = tmp_path / "work" / "repo"
    for name, text in REPO.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text.lstrip())
    return tmp_path / "work"


def unet(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(root)])}
    return subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


def files(work: Path) -> dict[str, dict]:
    folder = work / "repo" / "backend"  # the plugin's folder, in the repo (its workdir)
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def test_a_third_party_backend_is_validated_planned_applied_and_pruned(
        installed: Path, work: Path) -> None:
    done = unet(installed, work, "validate", "repo")
    assert done.returncode == 0, done.stdout + done.stderr

    done = unet(installed, work, "plan", "repo")
    assert done.returncode == 0, done.stderr
    assert "+ subnet file acme.web" in done.stdout
    assert "3 to create" in done.stdout

    done = unet(installed, work, "apply", "repo", "--auto-approve")
    assert done.returncode == 0, done.stderr
    assert "Apply complete: 3 created, 0 updated, 0 deleted" in done.stdout
    written = files(work)
    assert sorted(written) == ["network.acme.prod.json", "subnet.acme.db.json",
                               "subnet.acme.web.json"]
    assert written["subnet.acme.web.json"]["fields"]["cidrs"] == ["10.10.1.0/24"]
    assert written["subnet.acme.web.json"]["installation"] == "files"

    done = unet(installed, work, "plan", "repo", "--detailed-exitcode")
    assert done.returncode == 0 and "No changes." in done.stdout, done.stdout

    # A file changed by hand is drift, and the apply repairs it.
    web = work / "repo" / "backend" / "subnet.acme.web.json"
    edited = json.loads(web.read_text())
    edited["fields"]["cidrs"] = ["10.99.0.0/24"]
    web.write_text(json.dumps(edited))
    done = unet(installed, work, "plan", "repo", "--detailed-exitcode")
    assert done.returncode == 2 and "drift" in done.stdout.lower(), done.stdout
    done = unet(installed, work, "apply", "repo", "--auto-approve")
    assert done.returncode == 0, done.stderr
    assert files(work)["subnet.acme.web.json"]["fields"]["cidrs"] == ["10.10.1.0/24"]

    # A file of someone else is never read as ours, nor deleted; a subnet removed from
    # the repo is pruned.
    (work / "repo" / "backend" / "theirs.json").write_text(json.dumps({"installation": "other"}))
    network = work / "repo" / "tenants" / "acme" / "network.yaml"
    network.write_text(network.read_text().split("---\napiVersion: network.osac.io/v1alpha1"
                                                  "\nkind: Subnet\nmetadata: {name: db}")[0])
    done = unet(installed, work, "apply", "repo", "--auto-approve")
    assert done.returncode == 0, done.stderr
    assert "0 created, 0 updated, 1 deleted" in done.stdout
    assert sorted(files(work)) == ["network.acme.prod.json", "subnet.acme.web.json",
                                   "theirs.json"]


def test_a_third_party_backend_config_is_checked_against_its_own_schema(
        installed: Path, work: Path) -> None:
    managers = work / "repo" / "provider" / "managers.yaml"
    managers.write_text(managers.read_text().replace("config: {folder: backend}",
                                                     "config: {folder: backend, colour: red}"))
    done = unet(installed, work, "validate", "repo")
    assert done.returncode == 1
    assert "PLUGIN_CONFIG_INVALID" in done.stdout and "colour" in done.stdout, done.stdout


def test_once_the_plugin_is_removed_the_repo_names_what_is_missing(
        installed: Path, work: Path, tmp_path: Path) -> None:
    """The validation cache keys on the installed plugins: removing one is seen at once."""
    assert unet(installed, work, "validate", "repo").returncode == 0
    done = unet(tmp_path / "nothing", work, "validate", "repo")
    assert done.returncode == 1
    assert "PLUGIN_UNKNOWN" in done.stdout and "'folder'" in done.stdout, done.stdout


def test_a_plugin_that_does_not_load_is_named_with_why(installed: Path, work: Path) -> None:
    (installed / "unet_folder_backend" / "__init__.py").write_text("import not_there\n")
    done = unet(installed, work, "validate", "repo")
    assert done.returncode == 1
    assert "PLUGIN_UNKNOWN" in done.stdout, done.stdout
    assert "is installed, but unet_folder_backend:FolderManager does not load: " \
           "ModuleNotFoundError" in done.stdout, done.stdout


def test_a_backend_imports_nothing_of_unet_but_the_sdk() -> None:
    """managers/sdk.py is all a backend sees of unet: the third-party one and unet's own
    (each importing its own modules besides)."""
    root = Path(__file__).parent.parent
    plugins = {PLUGIN / "unet_folder_backend": "unet_folder_backend",
               root / "managers" / "ovn": "unet.managers.ovn",
               root / "managers" / "kubernetes": "unet.managers.kubernetes"}
    for folder, package in plugins.items():
        for path in folder.glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    name = node.module
                elif isinstance(node, ast.Import):
                    name = node.names[0].name
                else:
                    continue
                if name.split(".")[0] in ("reconciler", "managers"):
                    assert name in ("unet.managers.sdk", "unet.managers.command") or \
                        name.startswith(package + "."), f"{path}: imports {name}"


def test_a_third_party_backend_adds_its_own_command(installed: Path, work: Path) -> None:
    assert unet(installed, work, "apply", "repo", "--auto-approve").returncode == 0
    listed = unet(installed, work, "folder-files", "--path", "repo")
    assert listed.returncode == 0, listed.stderr
    assert "files: Logical_Switch" in listed.stdout or "files: " in listed.stdout
    assert sorted(line.split(": ", 1)[1] for line in listed.stdout.splitlines()) == \
        sorted(files(work))
    helped = unet(installed, work, "--help")
    assert "folder-files" in helped.stdout and "list the files of the repo's folder" \
        in helped.stdout
