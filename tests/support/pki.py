"""A throwaway PKI for TLS tests, made with the openssl command: certificate authorities,
and server and client certificates they sign, valid now or expired long ago.

EC keys (P-256), so that making a dozen certificates takes well under a second. Missing
openssl fails loudly: tests never skip because a tool is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

_CONFIG = """\
[ req ]
distinguished_name = dn
x509_extensions = authority
prompt = no
[ dn ]
[ authority ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ ca ]
default_ca = signer
[ signer ]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = anything
unique_subject = no
[ anything ]
commonName = supplied
"""

#: A certificate's extensions by purpose (a server's names are added to its own).
_EXTENSIONS = {"server": "basicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n",
               "client": "basicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n"}

#: When an expired certificate was valid: a day in 2020.
EXPIRED = (datetime(2020, 1, 1, tzinfo=UTC), datetime(2020, 1, 2, tzinfo=UTC))


def require_openssl() -> None:
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is not installed (apt-get install openssl): the TLS tests "
                           "make their certificates with it")


@dataclass(frozen=True)
class Identity:
    """A certificate, its key, and the certificate of the CA that signed it."""

    key: Path
    cert: Path
    ca_cert: Path


class Authority:
    """A certificate authority in its own folder."""

    def __init__(self, folder: Path, name: str) -> None:
        require_openssl()
        self.folder = folder
        folder.mkdir(parents=True)
        (folder / "openssl.cnf").write_text(_CONFIG)
        (folder / "index.txt").write_text("")
        (folder / "serial").write_text("1000\n")
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                      "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                      "-subj", f"/CN={name}")
        self.cert = folder / "ca.pem"

    def issue(self, name: str, purpose: str = "client",
              valid: tuple[datetime, datetime] | None = None,
              names: tuple[str, ...] = ("IP:127.0.0.1",)) -> Identity:
        """A certificate for `name`, valid from now for two days unless `valid` says
        otherwise. A server's holds `names` (subjectAltName entries; by default the address
        the tests' servers listen on; none: only its subject, CN=`name`)."""
        assert purpose in ("server", "client")
        extensions = _EXTENSIONS[purpose]
        if purpose == "server" and names:
            extensions += f"subjectAltName = {', '.join(names)}\n"
        (self.folder / f"{name}.ext").write_text(f"[ ext ]\n{extensions}")
        now = datetime.now(UTC)
        start, end = valid or (now - timedelta(hours=1), now + timedelta(days=2))
        self._openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                      "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                      "-subj", f"/CN={name}")
        self._openssl("ca", "-batch", "-notext", "-keyfile", "ca.key", "-cert", "ca.pem",
                      "-extfile", f"{name}.ext", "-extensions", "ext",
                      "-in", f"{name}.csr", "-out", f"{name}.pem",
                      "-startdate", start.strftime("%Y%m%d%H%M%SZ"),
                      "-enddate", end.strftime("%Y%m%d%H%M%SZ"))
        return Identity(self.folder / f"{name}.key", self.folder / f"{name}.pem", self.cert)

    def _openssl(self, command: str, *args: str) -> None:
        result = subprocess.run(["openssl", command, "-config", "openssl.cnf", *args],
                                cwd=self.folder, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"openssl {command} failed: {result.stderr}")
