"""TLS for `ssl:` Northbound remotes, with each NetworkManager's own certificates.

The OVS Python library keeps its SSL settings in class attributes of `ovs.stream.Stream`
(`ssl_set_private_key_file` and the like): one key, certificate and CA for the whole
process, read again whenever a stream is opened. Two OVN managers with different
certificates in one run cannot share that. So each manager makes one `ssl.SSLContext` of
its own from its files (`TlsFiles.context`), and unet's connections (rpc.py, the only
ones it makes) do TLS with Python's `ssl` module and that context. The OVS library's
global settings are never set.

A server is trusted for a certificate its CA signed that names the server (`TlsClient`):
any other certificate of the CA (another Northbound's, a chassis's) could pose as it
otherwise. OpenSSL compares the names, in the handshake.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: OpenSSL's verify codes for a certificate that does not name the server expected.
NAME_MISMATCH = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


class TlsConfigError(ValueError):
    """A key, certificate or CA file that cannot be used."""


@dataclass(frozen=True)
class TlsFiles:
    """A NetworkManager's client key, its certificate, and the CA certificate that signed
    the servers' certificates (PEM files, as ovn-nbctl's -p, -c and -C)."""

    key: str
    cert: str
    ca_cert: str

    def context(self) -> ssl.SSLContext:
        """The client context made from the files; TlsConfigError names the file that is
        missing, unreadable or not what it should be."""
        for setting, path in (("sslKey", self.key), ("sslCert", self.cert),
                              ("sslCaCert", self.ca_cert)):
            try:
                with open(path, "rb") as file:
                    file.read(1)
            except OSError as exc:
                raise TlsConfigError(f"{setting} {path} cannot be read: "
                                     f"{exc.strerror or exc}") from exc
        context = self.ca_context()
        context.check_hostname = True  # the name: wrap_socket's server_hostname
        try:
            context.load_cert_chain(self.cert, self.key)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"sslCert {self.cert} and sslKey {self.key} are not a PEM "
                                 f"certificate and its key ({reason(exc)})") from exc
        return context

    def ca_context(self) -> ssl.SSLContext:
        """A context that checks the server's CA only, and shows no client certificate: to
        read which names a certificate that was refused for its name holds."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_verify_locations(cafile=self.ca_cert)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"sslCaCert {self.ca_cert} holds no PEM CA certificate "
                                 f"({reason(exc)})") from exc
        return context


class TlsClient:
    """A manager's TLS to its servers: the context made from its files, and the name each
    server's certificate must hold: `serverName` when it is set, else the host of the
    remote connected to (each member of a cluster its own)."""

    def __init__(self, files: TlsFiles, server_name: str | None = None) -> None:
        self.files, self.server_name = files, server_name
        self.context = files.context()

    def expected_name(self, host: str) -> str:
        """The name the certificate of the server at `host` must hold."""
        return self.server_name or host

    def wrong_name(self, host: str, presented: str | None) -> str:
        """Why the certificate of the server at `host`, which holds the names `presented`
        (None: unknown), was refused."""
        whence = "serverName" if self.server_name else "the remote's host"
        holds = f"is for {presented}, not" if presented else "does not name"
        return (f"the server's certificate {holds} {tagged(self.expected_name(host))} "
                f"({whence}): if this is the Northbound, connect to it by a name or address "
                "its certificate holds, or set serverName to one")

    def presented_names(self, address: tuple[str, int], timeout: float) -> str | None:
        """The names in the certificate of the server at `address`, from a handshake of
        its own (None if it cannot be made); nothing but the handshake is sent."""
        try:
            with socket.create_connection(address, timeout=timeout) as raw, \
                    self.files.ca_context().wrap_socket(raw) as sock:
                return ", ".join(certificate_names(sock.getpeercert())) or "no name"
        except (OSError, TlsConfigError):
            return None


def certificate_names(certificate: Mapping[str, Any] | None) -> list[str]:
    """The names a certificate holds, as OpenSSL compares them with the name expected: its
    subjectAltName's DNS names and IP addresses, else (no DNS name) its subject's common
    name."""
    certificate = certificate or {}
    names = [f"DNS:{value}" if kind == "DNS" else tagged(value.strip())
             for kind, value in certificate.get("subjectAltName", ())
             if kind in ("DNS", "IP Address")]
    if not any(name.startswith("DNS:") for name in names):
        names += [f"CN={value}" for rdn in certificate.get("subject", ())
                  for key, value in rdn if key == "commonName"]
    return names


def tagged(name: str) -> str:
    """`name` as certificate_names says it: IP:ADDRESS (in its short form) or DNS:NAME."""
    try:
        return f"IP:{ipaddress.ip_address(name)}"
    except ValueError:
        return f"DNS:{name}"


def host_and_port(remote: str) -> tuple[str, int]:
    """The host (a name or an address, without an IPv6 address's brackets) and the port of
    one `ssl:HOST:PORT` or `tcp:HOST:PORT` remote."""
    host, _, port = remote.split(":", 1)[1].rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def reason(exc: ssl.SSLError) -> str:
    """What OpenSSL said, without the location in Python's source."""
    text = str(getattr(exc, "verify_message", None) or exc.strerror or exc)
    text = re.sub(r"^\[[A-Z0-9_]+: [A-Z0-9_]+\]\s*", "", text)  # [SSL: THE_CODE]
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text).strip()


def ssl_members(remote: str) -> list[str]:
    """The `ssl:` remotes of a connection string (several, separated by commas, for a
    cluster)."""
    return [member for member in map(str.strip, remote.split(",")) if member.startswith("ssl:")]
