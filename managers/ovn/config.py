"""The `ovn` manager's config: which Northbound to reach and how (a NetworkManager's `config`)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Annotated

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from unet.managers.sdk import ManagerConfig

if TYPE_CHECKING:
    from .tls import TlsFiles

_Name = Annotated[str, Field(min_length=1, max_length=63)]
_REMOTE = r"((tcp|ssl):[^,]+:[0-9]+|unix:[^,]+)"
_ENV = r"\$\{[A-Za-z_][A-Za-z0-9_]*\}"
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_IPV6 = r"[0-9A-Fa-f]{0,4}(:[0-9A-Fa-f]{0,4}){2,7}"  # roughly: the run checks it (_server_name)
#: What a certificate names a server by: a DNS name, an IPv4 or an IPv6 address; or ${ENV}.
_SERVER_NAME = rf"^({_LABEL}(\.{_LABEL})*\.?|{_IPV6}|{_ENV})$"


class OvnConfig(ManagerConfig):
    northbound: str = Field(
        "embedded", pattern=rf"^(embedded|\$\{{[A-Za-z_][A-Za-z0-9_]*\}}|{_REMOTE}(,{_REMOTE})*)$",
        description="OVSDB connection (tcp:HOST:PORT, ssl:HOST:PORT, unix:PATH, several "
                    "separated by ',' for a cluster) or 'embedded'")
    southbound: str | None = Field(
        None, pattern=rf"^(\$\{{[A-Za-z_][A-Za-z0-9_]*\}}|{_REMOTE}(,{_REMOTE})*)$",
        description="The OVN Southbound database, written as northbound is (ssl: uses the "
                    "same sslKey, sslCert and sslCaCert), for `unet reach --live`, which "
                    "traces packets there with ovn-trace; absent: reach answers from the "
                    "model alone")
    external_network: _Name = "physnet-external"
    gateway_chassis: list[_Name] = Field(default_factory=lambda: ["gw-1"], min_length=1)
    ssl_key: str | None = Field(None, description="Private key file (PEM) for ssl: remotes")
    ssl_cert: str | None = Field(None, description="Certificate file (PEM) of that key, for "
                                                   "ssl: remotes")
    ssl_ca_cert: str | None = Field(None, description="CA certificate file (PEM) that the "
                                                      "servers' certificates are signed by")
    server_name: str | None = Field(
        None, pattern=_SERVER_NAME, max_length=253,
        description="The name (DNS name or IP address) every ssl: server's certificate must "
                    "hold; default: the host of each ssl: remote")

    # `unet validate`: an ssl: remote needs the three files (their paths may be ${ENV}).
    model_config = ConfigDict(json_schema_extra={"allOf": [
        {"if": {"properties": {field: {"pattern": "(^|,)ssl:"}}, "required": [field]},
         "then": {"required": ["sslKey", "sslCert", "sslCaCert"]}}
        for field in ("northbound", "southbound")]})

    @field_validator("server_name")
    @classmethod
    def _server_name(cls, value: str | None) -> str | None:
        """A name with colons is an IPv6 address (the schema's pattern only resembles one)."""
        if value is not None and ":" in value and "${" not in value:
            try:
                ipaddress.IPv6Address(value)
            except ValueError as exc:
                raise PydanticCustomError("server_name", "serverName {value} is not an IPv6 "
                                          "address", {"value": value}) from exc
        return value

    @model_validator(mode="after")
    def _tls_files(self, info: ValidationInfo) -> OvnConfig:
        """An ssl: remote needs the three files; once the config is resolved for a run
        (`context={"resolved": True}`), they must be usable: each file missing, unreadable
        or wrong is named now, before anything connects."""
        remotes = f"{self.northbound},{self.southbound or ''}".split(",")
        if not any(m.strip().startswith("ssl:") for m in remotes):
            return self
        files = self.tls_files()
        if files is None:
            missing = [name for name, value in (("sslKey", self.ssl_key),
                                                ("sslCert", self.ssl_cert),
                                                ("sslCaCert", self.ssl_ca_cert)) if not value]
            which = "northbound" if "ssl:" in self.northbound else "southbound"
            raise PydanticCustomError("tls", "an ssl: {which} needs {missing}",
                                      {"which": which, "missing": ", ".join(missing)})
        if (info.context or {}).get("resolved"):
            from .tls import TlsConfigError

            try:
                files.context()
            except TlsConfigError as exc:
                raise PydanticCustomError("tls", "{problem}", {"problem": str(exc)}) from exc
        return self

    def tls_files(self) -> TlsFiles | None:
        """The TLS client files, when all three are set."""
        from .tls import TlsFiles

        if self.ssl_key and self.ssl_cert and self.ssl_ca_cert:
            return TlsFiles(self.ssl_key, self.ssl_cert, self.ssl_ca_cert)
        return None
    connect_timeout_seconds: float = Field(
        10.0, gt=0, le=3600,
        description="Seconds to connect to one Northbound server and have its first answer")
    leader_timeout_seconds: float = Field(
        30.0, gt=0, le=3600,
        description="Seconds to wait for a clustered Northbound database to have a leader")
    transaction_timeout_seconds: float = Field(
        60.0, gt=0, le=86400,
        description="Seconds one request (a read or a transaction) may take, whole reply "
                    "included")
