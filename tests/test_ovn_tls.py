"""ssl: Northbound remotes: client certificates, the server's name, clear errors, and
certificates per manager.

Every server here is an ovsdb-server listening on pssl:0:127.0.0.1 (or another loopback
address; the port it chose is read from its log) with a certificate of a CA made in the
test; like every OVS TLS server, it requires a client certificate signed by the CA it
trusts. Each also listens on a unix socket, for reading its rows with ovn-nbctl.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import use_northbound
from .support.ovnrun import apply, listening_port, ours, ovsdb_server, plan, unet
from .support.pki import EXPIRED, Authority, Identity
from .test_plan_golden import edit_text

if TYPE_CHECKING:
    from unet.managers.ovn.tls import TlsClient

#: A TLS failure is told at once; generous for a loaded machine, far below any timeout.
QUICK = 10.0


@pytest.fixture
def ca_a(tmp_path: Path) -> Authority:
    return Authority(tmp_path / "pki-a", "unet test CA a")


@pytest.fixture
def ca_b(tmp_path: Path) -> Authority:
    return Authority(tmp_path / "pki-b", "unet test CA b")


@contextlib.contextmanager
def tls_server(folder: Path, server: Identity, address: str = "127.0.0.1"
               ) -> Iterator[tuple[str, str]]:
    """An ovsdb-server with `server`'s certificate, trusting `server`'s CA for clients,
    listening on `address`; yields its ssl: remote and a unix: remote for reading it."""
    sock = folder / "nb.sock"
    host = f"[{address}]" if ":" in address else address
    with ovsdb_server(folder, f"pssl:0:{host}", f"--remote=punix:{sock}",
                      f"--private-key={server.key}", f"--certificate={server.cert}",
                      f"--ca-cert={server.ca_cert}") as log:
        subprocess.run(["ovn-nbctl", f"--db=unix:{sock}", "init"], check=True)
        yield f"ssl:{host}:{listening_port(log)}", f"unix:{sock}"


def use_tls(repo: Path, client: Identity, manager_anchor: str = "    gatewayChassis: [gw-1]\n"
            ) -> None:
    """Give the OVN manager whose config ends with `manager_anchor` these client files."""
    edit_text(repo, "provider/managers.yaml", manager_anchor,
              manager_anchor + f"    sslKey: {client.key}\n    sslCert: {client.cert}\n"
                               f"    sslCaCert: {client.ca_cert}\n")


def test_apply_and_plan_over_tls_with_a_client_certificate(
        example_copy: Path, ca_a: Authority, tmp_path: Path) -> None:
    with tls_server(tmp_path / "nb", ca_a.issue("server", "server")) as (remote, local):
        use_northbound(example_copy, remote)
        use_tls(example_copy, ca_a.issue("client"))
        applied = apply(tmp_path, example_copy)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert "Apply complete" in applied.stdout
        assert "unet.acme.vm.web-1.0" in {r["name"] for r in ours(local, "Logical_Switch_Port")}
        planned = plan(tmp_path, example_copy, "--detailed-exitcode")
        assert planned.returncode == 0, planned.stdout + planned.stderr
        assert "No changes." in planned.stdout


def test_two_ovn_managers_each_with_its_own_ca_and_certificate_in_one_run(
        example_copy: Path, ca_a: Authority, ca_b: Authority, tmp_path: Path) -> None:
    """One manager per region, each on a server of its own that trusts only its own CA:
    the OVS library's SSL settings, one per process, could serve only one of them."""
    with tls_server(tmp_path / "nb-a", ca_a.issue("server", "server")) as (remote_a, local_a), \
            tls_server(tmp_path / "nb-b", ca_b.issue("server", "server")) as (remote_b, local_b):
        repo = example_copy
        use_northbound(repo, remote_a)
        edit_text(repo, "provider/managers.yaml", "regions: [region-a, region-b]",
                  "regions: [region-a]")
        use_tls(repo, ca_a.issue("client"))
        with (repo / "provider" / "managers.yaml").open("a") as managers:
            managers.write("---\napiVersion: network.osac.io/v1alpha1\nkind: NetworkManager\n"
                           "metadata:\n  name: ovn-b\nspec:\n  role: fabric\n  plugin: ovn\n"
                           f"  regions: [region-b]\n  config:\n    northbound: {remote_b}\n"
                           "    gatewayChassis: [gw-b]\n")
        use_tls(repo, ca_b.issue("client"), "    gatewayChassis: [gw-b]\n")
        edit_text(repo, "provider/classes.yaml", "  region: region-b\n  default: true\n"
                  "  fabricManager: ovn\n", "  region: region-b\n  default: true\n"
                  "  fabricManager: ovn-b\n")

        managers = ("--manager", "ovn", "--manager", "ovn-b")
        applied = unet(tmp_path, "apply", str(repo), "--auto-approve", *managers)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        owners_a = {r["external_ids"]["unet:owner"].split("/")[1]
                    for r in ours(local_a, "Logical_Switch")}
        owners_b = {r["external_ids"]["unet:owner"].split("/")[1]
                    for r in ours(local_b, "Logical_Switch")}
        assert {"acme", "initech"} <= owners_a and "globex" not in owners_a, owners_a
        # initech's mirror network is in region-b too (peered with globex's corp)
        assert {"globex", "initech"} <= owners_b and "acme" not in owners_b, owners_b
        planned = unet(tmp_path, "plan", str(repo), "--detailed-exitcode", *managers)
        assert planned.returncode == 0, planned.stdout + planned.stderr


def use_server_name(repo: Path, name: str) -> None:
    """The name the OVN manager's servers' certificates must hold (`use_tls` first)."""
    edit_text(repo, "provider/managers.yaml", "    sslCaCert: ",
              f"    serverName: {name}\n    sslCaCert: ")


def _fails_quickly(cwd: Path, repo: Path, command: str = "apply") -> str:
    started = time.monotonic()
    result = apply(cwd, repo) if command == "apply" else plan(cwd, repo)
    assert time.monotonic() - started < QUICK, "a TLS failure is told at once"
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stderr


def test_a_certificate_either_side_does_not_trust_is_a_clear_error_naming_the_server(
        example_copy: Path, ca_a: Authority, ca_b: Authority, tmp_path: Path) -> None:
    good = ca_a.issue("client")
    expired = ca_a.issue("expired-client", valid=EXPIRED)
    stranger = ca_b.issue("stranger")
    refused = "the server refused this client's certificate ("
    cases = {  # what the client sees, and OpenSSL's words for why
        "trusts another CA": (Identity(good.key, good.cert, ca_b.cert),
                              "certificate verify failed (", "certificate"),
        "client of another CA": (Identity(stranger.key, stranger.cert, ca_a.cert), refused,
                                 "unknown ca"),
        "expired client": (Identity(expired.key, expired.cert, ca_a.cert), refused,
                           "certificate expired"),
    }
    with tls_server(tmp_path / "nb", ca_a.issue("server", "server")) as (remote, local):
        for index, (case, (client, what, why)) in enumerate(cases.items()):
            repo = tmp_path / f"repo-{index}"
            shutil.copytree(example_copy, repo)
            use_northbound(repo, remote)
            use_tls(repo, client)
            for command in ("apply", "plan"):
                message = _fails_quickly(tmp_path, repo, command)
                assert f"unet: TLS handshake with {remote} failed: {what}" in message, \
                    (case, message)
                assert why in message.split(what, 1)[1], (case, message)
        assert ours(local, "Logical_Switch") == []

    old_server = ca_a.issue("expired-server", "server", valid=EXPIRED)
    with tls_server(tmp_path / "nb-old", old_server) as (remote, _local):
        use_northbound(example_copy, remote)
        use_tls(example_copy, good)
        message = _fails_quickly(tmp_path, example_copy)
        assert f"unet: TLS handshake with {remote} failed: certificate verify failed " \
               "(certificate has expired)" in message, message


def test_the_tls_handshake_is_bounded_by_the_connect_timeout(ca_a: Authority) -> None:
    """A server that takes the connection (the kernel does, for a listening socket) and
    never answers the handshake."""
    from unet.managers.ovn.rpc import TlsFailed, open_stream

    with socket.create_server(("127.0.0.1", 0)) as listener:
        remote = f"ssl:127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(TlsFailed, match=re.escape(f"TLS handshake with {remote} timed "
                                                      "out after 1 s (connectTimeoutSeconds)")):
            open_stream(remote, 1.0, client_tls(ca_a.issue("client")))
        assert time.monotonic() - started < 3


def client_tls(client: Identity) -> TlsClient:
    from unet.managers.ovn.tls import TlsClient, TlsFiles

    return TlsClient(TlsFiles(str(client.key), str(client.cert), str(client.ca_cert)))


def test_missing_or_unusable_tls_files_are_named_before_connecting(
        example_copy: Path, ca_a: Authority, tmp_path: Path) -> None:
    client = ca_a.issue("client")
    other = ca_a.issue("other")
    # No server at all: the files are checked when the config is read, before connecting.
    use_northbound(example_copy, "ssl:127.0.0.1:9")
    cases = {
        "sslKey": (Identity(tmp_path / "nowhere.key", client.cert, client.ca_cert),
                   f"sslKey {tmp_path / 'nowhere.key'} cannot be read: No such file or "
                   "directory"),
        "sslCaCert": (Identity(client.key, client.cert, tmp_path),
                      f"sslCaCert {tmp_path} cannot be read: Is a directory"),
        "mismatch": (Identity(other.key, client.cert, client.ca_cert),
                     f"sslCert {client.cert} and sslKey {other.key} are not a PEM certificate "
                     "and its key (key values mismatch)"),
    }
    for index, (case, (files, expected)) in enumerate(cases.items()):
        repo = tmp_path / f"repo-{index}"
        shutil.copytree(example_copy, repo)
        use_tls(repo, files)
        message = _fails_quickly(tmp_path, repo, "plan")
        assert f"unet: NetworkManager ovn: config: {expected}" in message, (case, message)

    # A missing setting is a validation error, seen in pull requests too.
    result = unet(tmp_path, "validate", str(example_copy))
    assert result.returncode == 1
    assert "PLUGIN_CONFIG_INVALID plugin 'ovn' rejected its config: 'sslKey' is a required " \
           "property" in result.stdout + result.stderr


def _copy(example: Path, folder: Path, remote: str, client: Identity,
          server_name: str | None = None) -> Path:
    """A copy of the example whose OVN manager reaches `remote` as `client`."""
    shutil.copytree(example, folder)
    use_northbound(folder, remote)
    use_tls(folder, client)
    if server_name is not None:
        use_server_name(folder, server_name)
    return folder


def test_a_certificate_of_the_ca_for_another_name_is_refused_naming_both(
        example_copy: Path, ca_a: Authority, tmp_path: Path) -> None:
    """Any certificate the CA signed (another Northbound's, a chassis's) could pose as this
    Northbound while only the CA was checked: the certificate must name the remote's host,
    or serverName when set."""
    client = ca_a.issue("client")
    other = ca_a.issue("other-nb", "server", names=("DNS:nb-b.example.net", "IP:10.0.0.6"))
    with tls_server(tmp_path / "nb", other) as (remote, local):
        cases = {  # serverName → the name expected, as the error says it
            None: "IP:127.0.0.1 (the remote's host)",
            "nb-a.example.net": "DNS:nb-a.example.net (serverName)",
        }
        for index, (server_name, expected) in enumerate(cases.items()):
            repo = _copy(example_copy, tmp_path / f"repo-{index}", remote, client, server_name)
            for command in ("apply", "plan"):
                message = _fails_quickly(tmp_path, repo, command)
                assert f"unet: TLS handshake with {remote} failed: the server's certificate " \
                       f"is for DNS:nb-b.example.net, IP:10.0.0.6, not {expected}" in message, \
                    message
                assert "serverName" in message.split(expected, 1)[1], message
        assert ours(local, "Logical_Switch") == []

        repo = _copy(example_copy, tmp_path / "repo-named", remote, client, "nb-b.example.net")
        applied = apply(tmp_path, repo)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert ours(local, "Logical_Switch") != []


def test_a_certificate_naming_the_host_is_accepted_by_name_or_address(
        example_copy: Path, ca_a: Authority, tmp_path: Path) -> None:
    """A DNS name (`localhost`, resolved by the system), an IPv4 and an IPv6 address, each as
    the certificate's subjectAltName holds it."""
    client = ca_a.issue("client")
    server = ca_a.issue("nb", "server", names=("DNS:localhost", "IP:127.0.0.1", "IP:::1"))
    with tls_server(tmp_path / "nb4", server) as (remote4, local4), \
            tls_server(tmp_path / "nb6", server, "::1") as (remote6, local6):
        port4 = remote4.rsplit(":", 1)[1]
        for index, remote in enumerate((f"ssl:localhost:{port4}", remote4, remote6)):
            repo = _copy(example_copy, tmp_path / f"repo-{index}", remote, client)
            applied = apply(tmp_path, repo)
            assert applied.returncode == 0, (remote, applied.stdout + applied.stderr)
        assert ours(local4, "Logical_Switch") != [] and ours(local6, "Logical_Switch") != []


def test_each_member_of_a_cluster_is_checked_against_its_own_host(
        example_copy: Path, ca_a: Authority, tmp_path: Path) -> None:
    """Clustered remotes: the member connected to (here the second, the first being down)
    must hold its own host's name, not the first member's."""
    client = ca_a.issue("client")
    its_own = ca_a.issue("nb-2", "server", names=("IP:127.0.0.2",))
    the_first = ca_a.issue("nb-1", "server", names=("IP:127.0.0.1",))
    with socket.create_server(("127.0.0.1", 0)) as probe:
        down = f"ssl:127.0.0.1:{probe.getsockname()[1]}"  # nothing listens there after
    with tls_server(tmp_path / "nb-2", its_own, "127.0.0.2") as (remote, local), \
            tls_server(tmp_path / "nb-2b", the_first, "127.0.0.2") as (impostor, _local):
        repo = _copy(example_copy, tmp_path / "repo-own", f"{down},{remote}", client)
        applied = apply(tmp_path, repo)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert ours(local, "Logical_Switch") != []

        repo = _copy(example_copy, tmp_path / "repo-impostor", f"{down},{impostor}", client)
        message = _fails_quickly(tmp_path, repo, "plan")
        # Without a DNS name in subjectAltName, its common name counts as one (as OpenSSL has it).
        assert f"unet: TLS handshake with {impostor} failed: the server's certificate is for " \
               "IP:127.0.0.1, CN=nb-1, not IP:127.0.0.2 (the remote's host)" in message, message


def test_server_name_is_a_host_name_or_an_address(example_copy: Path, ca_a: Authority,
                                                  tmp_path: Path) -> None:
    client = ca_a.issue("client")
    for index, name in enumerate(("nb-a.example.net", "10.0.0.5", "'fd00::5'", "'nb a!'")):
        repo = _copy(example_copy, tmp_path / f"repo-{index}", "ssl:127.0.0.1:9", client, name)
        result = unet(tmp_path, "validate", str(repo))
        if name != "'nb a!'":
            assert result.returncode == 0, (name, result.stdout + result.stderr)
            continue
        assert result.returncode == 1, result.stdout + result.stderr
        assert "PLUGIN_CONFIG_INVALID plugin 'ovn' rejected its config: 'nb a!' is not " \
               "valid" in result.stdout, result.stdout
        assert "(/spec/config/serverName)" in result.stdout, result.stdout
