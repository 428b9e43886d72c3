"""Signing provenance with a throwaway SSH key (ssh-keygen -Y, namespace patchkit)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from patchkit.cli import main
from patchkit.core.errors import ReleaseError
from patchkit.release.signing import NAMESPACE, check, sign
from patchkit.release.verify import verify_dir
from tests.fixtures.release import do_release, make_build

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen")


def _key(tmp_path: Path, name: str) -> tuple[Path, str]:
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    kind, blob = key.with_suffix(".pub").read_text().split(" ")[:2]
    return key, f"{kind} {blob}"


def _allowed(tmp_path: Path, entries: list[tuple[str, str]], name: str = "allowed") -> Path:
    path = tmp_path / name
    path.write_text("".join(f'{who} namespaces="{NAMESPACE}" {pub}\n' for who, pub in entries))
    return path


def test_sign_and_verify_round_trip(tmp_path: Path) -> None:
    key, pub = _key(tmp_path, "release-key")
    dist = tmp_path / "dist"
    r = do_release(make_build(tmp_path), dist, sign_key=key)
    sig = dist / f"{r.name}.intoto.json.sig"
    assert sig in r.provenance
    assert sig.read_bytes().startswith(b"-----BEGIN SSH SIGNATURE-----")
    assert f"  {sig.name}\n" in (dist / "SHA256SUMS").read_text()
    allowed = _allowed(tmp_path, [("release@example.invalid", pub)])
    assert verify_dir(dist).differences == ()
    assert verify_dir(dist, allowed_signers=allowed).differences == ()
    res = CliRunner().invoke(main, ["verify", str(dist), "--allowed-signers", str(allowed)])
    assert res.exit_code == 0 and "signed by allowed signers" in res.output, res.output
    ok = check((dist / f"{r.name}.intoto.json").read_bytes(), sig.read_bytes(), allowed)
    assert ok.ok and ok.principal == "release@example.invalid"

    # someone else's key is not trusted
    _, other_pub = _key(tmp_path, "other-key")
    stranger = _allowed(tmp_path, [("other@example.invalid", other_pub)], "stranger")
    assert verify_dir(dist, allowed_signers=stranger).differences == (
        f"{sig.name}: signed by a key that is not in the allowed signers file",
    )
    res = CliRunner().invoke(main, ["verify", str(dist), "--allowed-signers", str(stranger)])
    assert res.exit_code == 12 and "not in the allowed signers file" in res.output, res.output

    # a statement changed after signing: the signature no longer matches it
    stmt = dist / f"{r.name}.intoto.json"
    bad = check(stmt.read_bytes() + b" ", sig.read_bytes(), allowed)
    assert not bad.ok and "does not match" in bad.problem
    # another namespace (a git commit signature, say) is not a patchkit signature
    git_sig = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", "git"],
        input=stmt.read_bytes(),
        capture_output=True,
        check=True,
    ).stdout
    assert not check(stmt.read_bytes(), git_sig, allowed).ok
    # no signature while --allowed-signers asks for one
    sig.unlink()
    diffs = verify_dir(dist, allowed_signers=allowed).differences
    assert f"{sig.name}: missing (--allowed-signers asks for a signature)" in diffs
    # the statement itself still verifies without the flag
    assert not [d for d in verify_dir(dist).differences if "intoto.json:" in d]


def test_a_key_that_cannot_sign_stops_the_release_before_writing(tmp_path: Path) -> None:
    not_a_key = tmp_path / "not-a-key"
    not_a_key.write_text("hello\n")
    dist = tmp_path / "dist"
    with pytest.raises(ReleaseError, match="ssh-keygen -Y sign with .* failed"):
        do_release(make_build(tmp_path), dist, sign_key=not_a_key)
    assert not dist.exists() or list(dist.iterdir()) == []
    with pytest.raises(ReleaseError, match="no such file"):
        sign(b"x", tmp_path / "missing")
    assert not check(b"x", b"garbage", tmp_path / "missing").ok
