"""TLS for `ssl:` Northbound remotes, with each NetworkManager's own certificates.

The OVS Python library keeps its SSL settings in class attributes of `ovs.stream.Stream`
(`ssl_set_private_key_file` and the like): one key, certificate and CA for the whole
process, read again whenever a stream is opened. Two OVN managers with different
certificates in one run cannot share that. So each manager makes one `ssl.SSLContext` of
its own from its files (`TlsFiles.context`), and that context makes every TLS connection
to its servers:

- unet's own connection (rpc.py) makes TLS with Python's `ssl` module and the context;
- the ovsdbapp IDL's streams are opened by the OVS library, also again when it reconnects,
  from the IDL's own thread. For them the library's `ssl` stream class is replaced (when
  this module is imported) by one that uses the context registered for the address it
  connects to (`serving`): a manager registers its servers while it is connected.

The OVS library's global settings are never set.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ovs.socket_util
from ovs import stream as ovs_stream


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
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        # As OVS itself and ovn-nbctl: the server is trusted for a certificate signed by the
        # CA, whatever name it holds (certificates made by ovs-pki name no host).
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_verify_locations(cafile=self.ca_cert)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"sslCaCert {self.ca_cert} holds no PEM CA certificate "
                                 f"({reason(exc)})") from exc
        try:
            context.load_cert_chain(self.cert, self.key)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"sslCert {self.cert} and sslKey {self.key} are not a PEM "
                                 f"certificate and its key ({reason(exc)})") from exc
        return context


def reason(exc: ssl.SSLError) -> str:
    """What OpenSSL said, without the location in Python's source."""
    text = str(getattr(exc, "verify_message", None) or exc.strerror or exc)
    text = re.sub(r"^\[[A-Z0-9_]+: [A-Z0-9_]+\]\s*", "", text)  # [SSL: THE_CODE]
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text).strip()


def ssl_members(remote: str) -> list[str]:
    """The `ssl:` remotes of a connection string (several, separated by commas, for a
    cluster)."""
    return [member for member in map(str.strip, remote.split(",")) if member.startswith("ssl:")]


# --- the IDL's streams ------------------------------------------------------------------------

#: address ("host:port", as in the remote) → (files, context, how many users now)
_SERVING: dict[str, tuple[TlsFiles, ssl.SSLContext, int]] = {}
_SERVING_LOCK = threading.Lock()


@contextlib.contextmanager
def serving(remote: str, files: TlsFiles, context: ssl.SSLContext) -> Iterator[None]:
    """While inside: streams the OVS library opens to the `ssl:` members of `remote` use
    `context`. The same server with other files at the same time is refused: it would get
    the certificates of whichever manager registered it first."""
    addresses = [member.split(":", 1)[1] for member in ssl_members(remote)]
    taken: list[str] = []
    try:
        with _SERVING_LOCK:
            for address in addresses:
                found = _SERVING.get(address)
                if found is not None and found[0] != files:
                    raise TlsConfigError(f"ssl:{address} is used with other certificates by "
                                         "another NetworkManager in this run")
                _SERVING[address] = (files, context, 1) if found is None \
                    else (found[0], found[1], found[2] + 1)
                taken.append(address)
        yield
    finally:
        with _SERVING_LOCK:
            for address in taken:
                files_, context_, users = _SERVING[address]
                if users > 1:
                    _SERVING[address] = (files_, context_, users - 1)
                else:
                    del _SERVING[address]


def _context_for(address: str) -> ssl.SSLContext | None:
    with _SERVING_LOCK:
        found = _SERVING.get(address)
    return found[1] if found is not None else None


class _ManagerSSLStream(ovs_stream.SSLStream):  # type: ignore[misc]
    """The OVS library's `ssl` stream, with the context of the manager that registered the
    address (`serving`); an address nobody registered is left to the library."""

    @staticmethod
    def _open(suffix: str, dscp: int) -> tuple[int, Any]:
        context = _context_for(suffix)
        if context is None:
            return ovs_stream.SSLStream._open(suffix, dscp)  # type: ignore[no-any-return]
        # As the library's own _open, but with this context.
        address = ovs.socket_util.inet_parse_active(suffix, 0, raises=False)
        family, sock = ovs.socket_util.inet_create_socket_active(socket.SOCK_STREAM, address)
        if sock is None:
            return family, sock
        tls_sock = context.wrap_socket(sock, do_handshake_on_connect=False)
        error = ovs.socket_util.inet_connect_active(tls_sock, address, family, dscp)
        if not error:
            try:
                tls_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:
                tls_sock.close()
                return ovs.socket_util.get_exception_errno(exc), None
        return error, tls_sock


ovs_stream.Stream.register_method("ssl", _ManagerSSLStream)
