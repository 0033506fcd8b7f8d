"""Throw-away X.509 material for the local Kubernetes parts, made with the openssl command.

One certificate authority per cluster signs every serving and client certificate; client
certificates name their user in CN and their groups in O, which is how Kubernetes authenticates
them (for example `O=system:nodes, CN=system:node:<hostname>` for a kubelet).
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

from scrapeq.local.processes import LocalPartError

# Long enough for every test session and a working day on `make cluster-up`.
VALIDITY_DAYS = 365


def openssl(*arguments: str) -> None:
    """Run one openssl command; raise LocalPartError with its message if it fails."""
    if shutil.which("openssl") is None:
        raise LocalPartError("openssl is needed to create the cluster's certificates")
    result = subprocess.run(
        ["openssl", *arguments], capture_output=True, text=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise LocalPartError(f"openssl {arguments[0]} failed: {result.stderr.strip()}")


def make_authority(directory: Path, common_name: str) -> None:
    """Create `ca.key` and a self-signed `ca.crt` in `directory`."""
    ca_key, ca_crt = str(directory / "ca.key"), str(directory / "ca.crt")
    openssl("genrsa", "-out", ca_key, "2048")
    openssl(
        "req", "-x509", "-new", "-key", ca_key, "-days", str(VALIDITY_DAYS),
        "-subj", f"/CN={common_name}", "-out", ca_crt,
    )  # fmt: skip


def issue_certificate(
    directory: Path,
    name: str,
    subject: str,
    *,
    server_names: list[str] | None = None,
    client: bool = False,
) -> None:
    """Write `<name>.key` and `<name>.crt` signed by the authority in `directory`.

    `server_names` (IP addresses and DNS names) makes it a serving certificate for them;
    `client` adds client authentication. `subject` is openssl's form: `/O=group/CN=user`.
    """
    usages = []
    if server_names:
        usages.append("serverAuth")
    if client:
        usages.append("clientAuth")
    extensions = directory / f"{name}.ext"
    lines = [
        "basicConstraints=CA:FALSE",
        "keyUsage=digitalSignature,keyEncipherment",
        f"extendedKeyUsage={','.join(usages)}",
    ]
    if server_names:
        alternative_names = [
            f"IP:{value}" if _is_address(value) else f"DNS:{value}" for value in server_names
        ]
        lines.append(f"subjectAltName={','.join(alternative_names)}")
    extensions.write_text("\n".join(lines) + "\n")
    key, csr, crt = (str(directory / f"{name}.{suffix}") for suffix in ("key", "csr", "crt"))
    openssl("genrsa", "-out", key, "2048")
    openssl("req", "-new", "-key", key, "-subj", subject, "-out", csr)
    openssl(
        "x509", "-req", "-in", csr, "-CA", str(directory / "ca.crt"),
        "-CAkey", str(directory / "ca.key"), "-CAcreateserial", "-days", str(VALIDITY_DAYS),
        "-extfile", str(extensions), "-out", crt,
    )  # fmt: skip


def make_service_account_keys(directory: Path) -> None:
    """Write the key pair the API server signs and verifies ServiceAccount tokens with."""
    key = str(directory / "service-account.key")
    openssl("genrsa", "-out", key, "2048")
    openssl("rsa", "-in", key, "-pubout", "-out", str(directory / "service-account.pub"))


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
