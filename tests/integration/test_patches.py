"""``git apply`` accepts each shipped patch against a file rebuilt from its hunks' preimage."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.fixtures.patches import diff_sections, preimage, shipped_series


def test_git_apply_accepts_each_patch(tmp_path: Path) -> None:
    for p in shipped_series():
        repo = tmp_path / p.name
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        sections = diff_sections(p.path.read_text(encoding="utf-8"))
        for path, hunks in sections.items():
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(preimage(hunks)) + "\n", encoding="utf-8")
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        r = subprocess.run(
            ["git", "-C", str(repo), "apply", "--index", str(p.path)], capture_output=True, text=True
        )
        assert r.returncode == 0, f"{p.filename}: {r.stderr}"
        for path, hunks in sections.items():
            text = (repo / path).read_text(encoding="utf-8")
            for hunk in hunks:
                for line in hunk[1:]:
                    if line.startswith("+"):
                        assert line[1:] in text, f"{p.filename}: {line!r} not applied"
