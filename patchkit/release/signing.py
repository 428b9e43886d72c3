"""Signatures with keys people already have: OpenSSH's ``ssh-keygen -Y`` (namespace patchkit).

- ``sign(data, key)``: ``ssh-keygen -Y sign -f KEY -n patchkit`` over ``data`` on stdin;
  the armoured signature (``-----BEGIN SSH SIGNATURE-----``) comes back. A key that needs
  a passphrase must be in ssh-agent (nothing may prompt: a deadline stops it).
- ``check(data, signature, allowed_signers)``: ``-Y find-principals`` names who signed
  (from the allowed-signers file, ``man ssh-keygen`` ALLOWED SIGNERS), then ``-Y verify``
  proves it; returns the principal or the reason it is not trusted.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

from patchkit.core.errors import ReleaseError, ToolMissing
from patchkit.core.proc import run

__all__ = ["NAMESPACE", "SIGNATURE_MAX", "SIG_SUFFIX", "Checked", "check", "sign"]

NAMESPACE = "patchkit"
SIG_SUFFIX = ".sig"
SIGNATURE_MAX = 64 << 10  # an SSH signature is ~300 bytes (RSA 4096: ~1 KiB)
_DEADLINE = 60.0
_BEGIN = b"-----BEGIN SSH SIGNATURE-----"


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise ToolMissing(
            "ssh-keygen not found (signing needs OpenSSH >= 8.1)", hint="install openssh-client"
        )
    return found


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:300]


def sign(data: bytes, key: Path) -> bytes:
    """The SSH signature of ``data`` with the private ``key`` (ReleaseError if refused)."""
    if not key.is_file():
        raise ReleaseError(
            f"--sign-key {key}: no such file", hint="pass an SSH private key (e.g. ~/.ssh/id_ed25519)"
        )
    res = run(
        [_ssh_keygen(), "-Y", "sign", "-f", str(key), "-n", NAMESPACE],
        input=data,
        timeout=_DEADLINE,
        binary=True,
    )
    if res.returncode is None:
        raise ReleaseError(
            f"ssh-keygen -Y sign with {key} did not finish in {_DEADLINE:.0f}s "
            "(does the key want a passphrase?)",
            hint="add the key to ssh-agent (ssh-add KEY) first",
        )
    if res.returncode != 0 or not res.data.startswith(_BEGIN):
        raise ReleaseError(
            f"ssh-keygen -Y sign with {key} failed: {_first_line(res.stderr) or f'exit {res.returncode}'}",
            hint="is it an SSH private key? (ssh-keygen -y -f KEY prints its public half)",
        )
    return res.data


@dataclasses.dataclass(frozen=True, kw_only=True)
class Checked:
    principal: str | None  # who signed, when the signature is good
    problem: str  # why it is not (empty when good)

    @property
    def ok(self) -> bool:
        return not self.problem


def check(data: bytes, signature: bytes, allowed_signers: Path) -> Checked:
    """Who signed ``data`` (``signature``), if that is someone ``allowed_signers`` trusts."""
    if len(signature) > SIGNATURE_MAX or not signature.startswith(_BEGIN):
        return Checked(principal=None, problem="not an SSH signature")
    tool = _ssh_keygen()
    with tempfile.TemporaryDirectory(prefix="patchkit-sig-") as tmp:
        sig = Path(tmp) / "data.sig"
        sig.write_bytes(signature)
        found = run(
            [tool, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)], timeout=_DEADLINE
        )
        principals = [ln.strip() for ln in found.stdout.splitlines() if ln.strip()]
        if found.returncode != 0 or not principals:
            return Checked(principal=None, problem="signed by a key that is not in the allowed signers file")
        for principal in principals:
            res = run(
                [
                    tool,
                    "-Y",
                    "verify",
                    "-f",
                    str(allowed_signers),
                    "-I",
                    principal,
                    "-n",
                    NAMESPACE,
                    "-s",
                    str(sig),
                ],
                input=data,
                timeout=_DEADLINE,
            )
            if res.returncode == 0:
                return Checked(principal=principal, problem="")
        return Checked(
            principal=None,
            problem=f"the signature does not match the file (signer {principals[0]}, namespace {NAMESPACE})",
        )
