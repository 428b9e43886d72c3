"""Every action a `ci-template` workflow uses is pinned by a full commit
sha with its release tag as a comment (`OWNER/REPO@SHA # vX.Y.Z`, what OpenSSF Scorecard
checks), from one data file (release/templates/action-pins.toml), and `--update-pins`
moves the pins (release.ci.update_pins; the git side is tested in
tests/integration/release/test_ci_pins.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from patchkit.release import ci
from patchkit.release.ci import MatrixEntry, parse_ci_cache, render_canary, render_workflow

PINNED = re.compile(r"^\s*(?:- )?uses: [A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")
ENTRIES = [
    MatrixEntry(recipe="cpu-rpc", runner="ubuntu-22.04", cuda=""),
    MatrixEntry(recipe="cuda", runner="ubuntu-22.04", cuda="12.4.1"),
    MatrixEntry(recipe="win", runner="windows-2022", cuda="12.4.1"),
]


def _outputs() -> dict[str, str]:
    out = {
        "release": render_workflow(ENTRIES),
        "release --cache-remote gha": render_workflow(ENTRIES, cache=parse_ci_cache("gha")),
        "release --cache-remote secret:X": render_workflow(ENTRIES, cache=parse_ci_cache("secret:X")),
        "release --cache-remote secret:X --launcher sccache": render_workflow(
            ENTRIES, cache=parse_ci_cache("secret:X", "sccache")
        ),
        "canary": render_canary(recipe="cpu-rpc", upstream="https://github.com/ggml-org/llama.cpp"),
    }
    return out


@pytest.mark.parametrize("which", list(_outputs()))
def test_every_uses_in_every_template_output_is_pinned_by_sha(which: str) -> None:
    text = _outputs()[which]
    uses = [ln for ln in text.splitlines() if re.match(r"^\s*(- )?uses:", ln)]
    assert uses, "no `uses:` found: the check is broken"
    for ln in uses:
        assert PINNED.match(ln), f"{which}: not pinned by a commit sha: {ln.strip()}"
    assert "@@" not in text


def test_the_pins_file_is_what_the_templates_use_and_well_formed() -> None:
    pins = ci.load_pins()
    used = {m.group(1) for text in _outputs().values() for m in re.finditer(r"uses: ([^@\s]+)@", text)}
    assert used == set(pins), "a pin no template uses, or an action without a pin"
    for name, pin in pins.items():
        assert pin.action == name and re.fullmatch(r"[0-9a-f]{40}", pin.sha)
        assert pin.tag == pin.track or pin.tag.startswith(pin.track + "."), pin
    # the file is patchkit's canonical text of its pins (what --update-pins writes)
    shipped = (
        Path(__file__).resolve().parents[3] / "patchkit/release/templates/action-pins.toml"
    ).read_text()
    assert ci.pins_text(pins) == shipped


def test_the_rendered_line_names_the_tag() -> None:
    pins = ci.load_pins()
    text = render_workflow(ENTRIES)
    co = pins["actions/checkout"]
    assert f"uses: actions/checkout@{co.sha} # {co.tag}" in text


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[actions."a/b"]\ntrack = "v1"\ntag = "v1.0.0"\nsha = "abc"\n', "not a full commit sha"),
        ('[actions."a/b"]\ntrack = "v1"\ntag = "v2.0.0"\nsha = "' + "a" * 40 + '"\n', "not a release of v1"),
        ('[actions."a b"]\ntrack = "v1"\ntag = "v1.0.0"\nsha = "' + "a" * 40 + '"\n', "not OWNER/REPO"),
        ('[actions."-a/b"]\ntrack = "v1"\ntag = "v1.0.0"\nsha = "' + "a" * 40 + '"\n', "not OWNER/REPO"),
        ('[actions."a/b"]\ntrack = "v1"\nsha = "' + "a" * 40 + '"\n', "tag"),
        ("[actions\n", "not TOML"),
        ("", r"no \[actions"),
    ],
)
def test_a_bad_pins_file_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "pins.toml"
    f.write_text(text)
    with pytest.raises(ValueError, match=needle) as e:
        ci.load_pins(f)
    assert "\n" not in str(e.value)


def _pin(action: str, track: str, tag: str, sha: str) -> ci.ActionPin:
    return ci.ActionPin(action=action, track=track, tag=tag, sha=sha)


A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)


def test_update_moves_each_pin_to_the_newest_release_of_its_line() -> None:
    pins = {
        "o/one": _pin("o/one", "v4", "v4.1.0", A),
        "o/two": _pin("o/two", "v0.2", "v0.2.9", B),
        "o/three": _pin("o/three", "v1", "v1.0.0", C),
    }
    tags = {
        # v5 is another line, v4 a moving major tag, rc a pre-release: none of them count
        "o/one": {"v4": D, "v4.1.0": A, "v4.2.0": C, "v4.10.1": D, "v5.0.0": B, "v4.11.0-rc1": B},
        "o/two": {"v0.2.9": B, "v0.2.10": A, "v0.3.0": C},
        "o/three": {"v1.0.0": C},
    }
    new, lines = ci.update_pins(pins, tags.__getitem__)
    assert new["o/one"] == _pin("o/one", "v4", "v4.10.1", D)
    assert new["o/two"] == _pin("o/two", "v0.2", "v0.2.10", A)
    assert new["o/three"] == pins["o/three"]
    assert any(ln.startswith("o/one: v4.1.0 (aaaaaaaaaaaa) -> v4.10.1 (dddddddddddd)") for ln in lines), lines
    assert any(ln.startswith("o/three: v1.0.0 (cccccccccccc), the newest of v1") for ln in lines), lines


def test_an_update_never_goes_back_to_an_older_release() -> None:
    pins = {"o/one": _pin("o/one", "v5", "v5.6.0", A)}
    new, lines = ci.update_pins(pins, lambda _: {"v5.0.0": B, "v6.0.0": C})  # v5.6.0's tag is gone
    assert new == pins and lines == ["o/one: v5.6.0 (aaaaaaaaaaaa), the newest of v5"]


def test_a_moved_release_tag_keeps_the_pin_and_says_so() -> None:
    pins = {"o/one": _pin("o/one", "v4", "v4.1.0", A)}
    new, lines = ci.update_pins(pins, lambda _: {"v4.1.0": B})
    assert new == pins
    assert any("v4.1.0 now names bbbbbbbbbbbb, not the pinned aaaaaaaaaaaa" in ln for ln in lines), lines


def test_no_release_in_the_line_is_an_error() -> None:
    pins = {"o/one": _pin("o/one", "v4", "v4.1.0", A)}
    with pytest.raises(ValueError, match="o/one: no release tag of v4"):
        ci.update_pins(pins, lambda _: {"v5.0.0": B, "v4": A})


def test_pins_text_round_trips(tmp_path: Path) -> None:
    pins = ci.load_pins()
    f = tmp_path / "p.toml"
    f.write_text(ci.pins_text(pins))
    assert ci.load_pins(f) == pins
