"""Comparisons, measured in the same run: unet against another tool doing the same work.

- `compare_schema`: `unet validate` (cold, every check) against check-jsonschema checking
  the same documents against unet's own per-kind schemas (shapes only), one document per
  file, the file names passed in as few invocations as the system allows;
- `compare_observe`: unet's observe of the Northbound (connect, then our rows as objects)
  in a fresh process, under unet's collector policy, against `ovn-nbctl list` of the same
  tables;
- `compare_cluster`: a stage on the 3-member cluster against the same stage on one server;
- `compare_daemon`: a stage of the daemon against the one-shot stage it replaces;
- the initial apply against an ovn-nbctl script is benchmarks/nbctl.py's.

`COMPARISONS` names them, as `--compare` takes them.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

from .fixture import Fixture, run_child, warm_page_cache
from .generate import INSTALLATION
from .measure import measure
from .northbound import OVN_TABLES, ClusterServer
from .results import Comparison, Result
from .stages import DAEMON_TITLES, STAGES, ensure_applied
from .system import SOURCE, tool

COMPARISONS = ("schema", "nbctl", "observe", "cluster")


def split_repo(fx: Fixture) -> tuple[Path, list[str]]:
    """The repo's manifests, one document per file (check-jsonschema reads one document
    per YAML file); written once per size, untimed."""
    root = fx.repo.parent / "split"
    listing = root / "files.txt"
    if listing.is_file():
        return root, listing.read_text().split()
    if root.exists():
        shutil.rmtree(root)
    names: list[str] = []
    for number, path in enumerate(sorted(fx.repo.rglob("*.yaml"))):
        if ".git" in path.parts:
            continue
        text = path.read_text()
        documents = [d for d in text.split("\n---\n")
                     if "apiVersion:" in d]  # the header comment is not a document
        folder = root / f"{number // 1000:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        for index, document in enumerate(documents):
            name = f"{folder.name}/{number % 1000:03d}-{index:02d}.yaml"
            (root / name).write_text(document if document.endswith("\n")
                                     else document + "\n")
            names.append(name)
    listing.write_text("\n".join(names) + "\n")
    return root, names


def bundled_schema(target: Path) -> Path:
    """The per-kind schemas unet checks shapes with (not the editors' unet.schema.json,
    which adds rules unet reports from its semantic stage), each embedded under its own
    $id behind a switch on the kind, so a validator resolves the `$ref`s without the
    network."""
    folder = SOURCE / "schemas"
    kinds = [json.loads(path.read_text()) for path in sorted(folder.glob("*.schema.json"))
             if path.name != "unet.schema.json"]
    top = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["apiVersion", "kind"],
        "properties": {"kind": {"enum": [schema["title"] for schema in kinds]}},
        "allOf": [{"if": {"properties": {"kind": {"const": schema["title"]}},
                          "required": ["kind"]},
                   "then": {"$ref": schema["$id"]}} for schema in kinds],
        "$defs": {f"bundled:{schema['title']}": schema for schema in kinds},
    }
    target.write_text(json.dumps(top))
    return target


def _chunks_of_args(names: list[str], limit: int = 1_000_000) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for name in names:
        if chunk and size + len(name) + 1 > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(name)
        size += len(name) + 1
    if chunk:
        yield chunk


def compare_schema(fx: Fixture, unet: Result | None, repeat: int) -> Comparison:
    """unet validate (cold, folder) against check-jsonschema on the same documents."""
    checker = tool("check-jsonschema")
    if unet is None:
        unet = measure("validate", "folder", fx, repeat)
    if checker is None:
        return Comparison("validate vs check-jsonschema", fx.tenants, "validate", "missing",
                          unet.wall_s, unet.cpu_s, 0, 0, ok=False,
                          note="check-jsonschema is not installed: pip install -e '.[bench]'")
    root, names = split_repo(fx)
    schema = bundled_schema(fx.scratch / "unet.bundled.schema.json")
    load = os.getloadavg()[0]
    walls, cpus, ok = [], [], True
    print(f"  check-jsonschema on {len(names):,} documents x{repeat} ...", end="",
          file=sys.stderr, flush=True)
    for _ in range(repeat):
        warm_page_cache(root)
        wall = cpu = 0.0
        for chunk in _chunks_of_args(names):
            run = run_child([checker, "--schemafile", str(schema), *chunk], fx,
                            "check-jsonschema", cwd=root)
            wall, cpu = wall + run.wall_s, cpu + run.cpu_s
            ok = ok and run.exit_code == 0
        walls.append(wall)
        cpus.append(cpu)
        print(f" {wall:.1f}s", end="", file=sys.stderr, flush=True)
    print("" if ok else f" FAILED: {run.tail()}", file=sys.stderr)
    return Comparison("validate vs check-jsonschema", fx.tenants,
                      "unet validate, cold (schema + models + every semantic check)",
                      f"check-jsonschema, schema only, {len(names):,} single-document files",
                      unet.wall_s, unet.cpu_s, statistics.median(walls),
                      statistics.median(cpus), ok=ok and unet.ok, load=round(load, 2),
                      note="" if ok else f"check-jsonschema failed: {run.tail()}")


#: Observe as a unet process does: with the collector policy `unet`'s entry point sets
#: (reconciler/heap.py), off from the start and the heap frozen at exit. Left on, the
#: collector scanned the decoded reply and the new objects again and again: ×2.3 the CPU
#: of observe at 1,000 tenants, which no unet command pays.
_OBSERVE_DRIVER = """\
import gc, json, sys, time
start = time.perf_counter()
from unet.managers.ovn.northbound import Northbound
from unet.reconciler import heap
imported = time.perf_counter()
heap.switch_off()
nb = Northbound(sys.argv[1])
connected = time.perf_counter()
observed = nb.observe(sys.argv[2], sys.argv[3])
done = time.perf_counter()
collector = "on" if gc.isenabled() else "off"
nb.close()
print(json.dumps({"import_s": imported - start, "connect_s": connected - imported,
                  "observe_s": done - connected, "objects": len(observed.objects),
                  "collector": collector}))
heap.before_exit()
"""


def compare_observe(fx: Fixture, repeat: int) -> Comparison:
    """unet's observe (connect: the leader found, the schema read; observe: our rows as objects),
    in a fresh process with unet's collector policy, against `ovn-nbctl list` of the same 11
    tables."""
    ensure_applied(fx)
    load = os.getloadavg()[0]
    print(f"  observe vs ovn-nbctl list x{repeat} ...", end="", file=sys.stderr, flush=True)
    inner, outer, lists = [], [], []
    objects = 0
    ok = True
    for _ in range(repeat):
        run = run_child([sys.executable, "-c", _OBSERVE_DRIVER, fx.nb.remote, INSTALLATION,
                         "ovn"], fx, "observe")
        timings = run.output_json()
        ok = ok and run.exit_code == 0 and bool(timings)
        if not ok:
            break
        objects = int(timings["objects"])
        inner.append((timings["connect_s"] + timings["observe_s"], timings))
        outer.append(run)
        command = ["ovn-nbctl", f"--db={fx.nb.remote}", "--format=json", "list",
                   OVN_TABLES[0]]
        for table in OVN_TABLES[1:]:
            command += ["--", "list", table]
        lists.append(run_child(command, fx, "nbctl-list", stdout=Path(os.devnull)))
        print(f" {inner[-1][0]:.1f}s/{lists[-1].wall_s:.1f}s", end="", file=sys.stderr,
              flush=True)
    print("" if ok else f" FAILED: {run.tail()}", file=sys.stderr)
    if not ok:
        return Comparison("observe vs ovn-nbctl list", fx.tenants, "observe", "list", 0, 0,
                          0, 0, ok=False, note=f"the observe driver failed: {run.tail()}")
    seconds = statistics.median(s for s, _ in inner)
    middle = sorted(inner, key=lambda item: item[0])[len(inner) // 2][1]
    return Comparison(
        "observe vs ovn-nbctl list", fx.tenants,
        "Northbound() + observe() in a fresh process, collector off as in unet (imports "
        "excluded)",
        "ovn-nbctl --format=json list of the 11 tables (to /dev/null)",
        seconds, statistics.median(r.cpu_s for r in outer),
        statistics.median(r.wall_s for r in lists), statistics.median(r.cpu_s for r in lists),
        statistics.median(r.server_cpu_s for r in outer),
        statistics.median(r.server_cpu_s for r in lists), ok=True, load=round(load, 2),
        note=f"{objects:,} objects; connect {middle['connect_s']:.2f} s, observe "
             f"{middle['observe_s']:.2f} s; unet cpu is the whole process")


def compare_cluster(fx: Fixture, clustered: Result, standalone: Result) -> Comparison:
    """A stage on the 3-member cluster against the same stage on one server, measured in
    the same run (their figures are in the stages' tables too)."""
    cluster = fx.servers.get("cluster")
    elections = cluster.elections() if isinstance(cluster, ClusterServer) else 0
    return Comparison(
        f"{standalone.stage}: 3-member cluster vs standalone", fx.tenants,
        f"{clustered.stage}: three ovsdb-servers in one Raft cluster, unix sockets",
        f"{standalone.stage}: one standalone ovsdb-server",
        clustered.wall_s, clustered.cpu_s, standalone.wall_s, standalone.cpu_s,
        clustered.server_cpu_s, standalone.server_cpu_s, ok=clustered.ok and standalone.ok,
        note=f"NB cpu is the 3 members' together; {elections} election(s) in the members' "
             "logs (1: no leader change)", load=clustered.load)


def compare_shard(fx: Fixture, shard: Result, whole: Result) -> Comparison:
    """A shard's stage against the same stage of the whole repo, measured in the same run:
    what matters is its peak memory, a share of the whole's."""
    ratio = shard.peak_mib / whole.peak_mib if whole.peak_mib else 0.0
    return Comparison(
        f"{shard.stage} vs {whole.stage}", fx.tenants, STAGES[shard.stage].title,
        STAGES[whole.stage].title, shard.wall_s, shard.cpu_s, whole.wall_s, whole.cpu_s,
        shard.server_cpu_s, whole.server_cpu_s, ok=shard.ok and whole.ok,
        note=f"peak {shard.peak_mib:,.0f} MiB vs {whole.peak_mib:,.0f} MiB: ×{ratio:.2f} of "
             "the unsharded peak", load=shard.load)


def compare_daemon(fx: Fixture, daemon: Result, one_shot: Result) -> Comparison:
    """A stage of the daemon against the one-shot stage it replaces, measured in the same
    run (their figures are in the stages' tables too)."""
    return Comparison(
        f"{daemon.stage} vs {one_shot.stage}", fx.tenants, DAEMON_TITLES[daemon.stage],
        STAGES[one_shot.stage].title, daemon.wall_s, daemon.cpu_s, one_shot.wall_s,
        one_shot.cpu_s, ok=daemon.ok and one_shot.ok, note=daemon.note, load=daemon.load)
