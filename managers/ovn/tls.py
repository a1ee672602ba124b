"""TLS for `ssl:` Northbound remotes, with each NetworkManager's own certificates.

The OVS Python library keeps its SSL settings in class attributes of `ovs.stream.Stream`
(`ssl_set_private_key_file` and the like): one key, certificate and CA for the whole
process, read again whenever a stream is opened. Two OVN managers with different
certificates in one run cannot share that. So each manager makes one `ssl.SSLContext` of
its own from its files (`TlsFiles.context`), and unet's connections (rpc.py, the only
ones it makes) do TLS with Python's `ssl` module and that context. The OVS library's
global settings are never set.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass


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
