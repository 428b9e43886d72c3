"""Release manifests and provenance statements written by the code path before the typed
records (spec.manifest, release.provenance) still read, verify and come out byte for byte:
the literal JSON below is what `patchkit release` wrote for the Windows CUDA fixture build
(tests.fixtures.release.make_build) before the records existed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from patchkit.core.fs import sha256_bytes, sha256_file
from patchkit.release.archive import Member, write_archive
from patchkit.release.provenance import dump_statement
from patchkit.release.release import SUMS, write_sums
from patchkit.release.verify import verify_dir
from patchkit.spec.buildinfo import CheckStatus, SmokeStatus
from patchkit.spec.manifest import ReleaseManifest, dump_manifest, load_manifest
from tests.fixtures.release import do_release, make_build

STEM = "llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86"

OLD_MANIFEST = """\
{
  "archive": "llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86.zip",
  "cmake": {
    "build_type": "Release",
    "defines": {
      "GGML_NATIVE": "OFF",
      "GGML_RPC": "ON"
    },
    "generator": "Ninja",
    "toolchain": null
  },
  "cuda": {
    "archs": [
      86,
      60,
      75,
      61
    ],
    "cmake_architectures": "60-real;61-real;75-real;86-real",
    "nvcc": "12.4",
    "proven": {
      "bin/ggml-cuda.dll": [
        "sm_60",
        "sm_61",
        "sm_75",
        "sm_86"
      ]
    }
  },
  "experimental": false,
  "files": [
    {
      "mode": "644",
      "path": "LICENSE",
      "sha256": "345385d159ccb31af655ce78503eeaed982d79ab82aff5ef33eac2cf8bfde252",
      "size": 54,
      "type": "LICENSE"
    },
    {
      "mode": "755",
      "path": "bin/ggml-cuda.dll",
      "sha256": "84cb08df00d457e2e878ed783bef6185dfbb05c6ded28574d1d28d8f8cd48752",
      "size": 2474,
      "type": "SHARED_LIBRARY"
    },
    {
      "mode": "755",
      "path": "bin/ggml-rpc-server.exe",
      "sha256": "a15867bd4103248907add002e7e91e35da4f0a12f2a23592a447d0c4757e2c8b",
      "size": 2774,
      "type": "EXECUTABLE"
    },
    {
      "mode": "755",
      "path": "bin/ggml.dll",
      "sha256": "a38ed8030a394af99f3b3ef1f118e82286f843788b67694dfc2c06f758564e34",
      "size": 2224,
      "type": "SHARED_LIBRARY"
    },
    {
      "mode": "755",
      "path": "bin/llama-cli.exe",
      "sha256": "a9652691a24d29a1cb0e7b06f10f3c7fc20bd274c3848b1267467a14ccbbefab",
      "size": 2474,
      "type": "EXECUTABLE"
    },
    {
      "mode": "755",
      "path": "bin/llama.dll",
      "sha256": "3f6572f4a3ceb0c23a58d76d4aab3668e17ad2364df82d498b1741362156bcb6",
      "size": 2274,
      "type": "SHARED_LIBRARY"
    }
  ],
  "identity": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
  "imports": {
    "driver": [],
    "system": []
  },
  "mtime_from": "upstream.commit_date",
  "name": "llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86",
  "patches": [
    {
      "experimental": false,
      "file": "0001-rpc.patch",
      "name": "rpc-deserialize-tensor-zero-nbytes",
      "result": "applied",
      "sha256": "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef",
      "status": "pending",
      "when": "e95d.."
    }
  ],
  "patchkit_version": "0.1.0",
  "pe_edits": [
    {
      "after": {
        "stack_commit": 4096,
        "stack_reserve": 268435456
      },
      "before": {
        "stack_commit": 4096,
        "stack_reserve": 2097152
      },
      "file": "bin/llama-cli.exe"
    }
  ],
  "platform": {
    "arch": "x86_64",
    "os": "windows"
  },
  "recipe": {
    "file": "recipes/win-cuda.toml",
    "name": "win-cuda",
    "sha256": "abababababababababababababababababababababababababababababababab"
  },
  "released_by": "patchkit 0.1.0",
  "reproducible": {
    "any_folder": true,
    "launcher": "none",
    "why": "source paths relative to the build folder (ccache's base dir, or -ffile-prefix-map without a launcher), SOURCE_DATE_EPOCH = the upstream commit time, nvcc's temporary files named after the object"
  },
  "rpc_protocol": null,
  "runtime": null,
  "schema": 1,
  "series_hash": "5f3c2a1b00000000000000000000000000000000000000000000000000000000",
  "smoke": {
    "checks": [
      {
        "name": "version",
        "status": "pass",
        "why": "ran <out>/bin/llama-cli --version"
      }
    ],
    "status": "passed"
  },
  "source": null,
  "source_date_epoch": 1786106096,
  "targets": [
    "llama-cli",
    "ggml-rpc-server"
  ],
  "tools": {
    "c_compiler": "GNU 12.2.0",
    "ccache": "4.8",
    "cmake": "4.1.2",
    "cxx_compiler": "GNU 12.2.0",
    "ninja": "1.13.0",
    "nvcc": "12.4"
  },
  "upstream": {
    "commit": "82bb48500a9a6b3374da2cf5811695369278e4d3",
    "commit_date": "2026-08-07T12:34:56+00:00",
    "ref": null,
    "url": "https://github.com/ggml-org/llama.cpp"
  },
  "variant": "cuda12-sm60-61-75-86",
  "waivers": []
}
"""

OLD_STATEMENT = """\
{
  "_type": "https://in-toto.io/Statement/v1",
  "predicate": {
    "buildDefinition": {
      "buildType": "urn:patchkit:buildtype:release:v1",
      "externalParameters": {
        "patches": [
          "rpc-deserialize-tensor-zero-nbytes"
        ],
        "platform": {
          "arch": "x86_64",
          "os": "windows"
        },
        "recipe": {
          "file": "recipes/win-cuda.toml",
          "name": "win-cuda",
          "sha256": "abababababababababababababababababababababababababababababababab"
        },
        "targets": [
          "llama-cli",
          "ggml-rpc-server"
        ],
        "upstream": {
          "commit": "82bb48500a9a6b3374da2cf5811695369278e4d3",
          "ref": null,
          "url": "https://github.com/ggml-org/llama.cpp"
        }
      },
      "internalParameters": {
        "cmake": {
          "build_type": "Release",
          "defines": {
            "GGML_NATIVE": "OFF",
            "GGML_RPC": "ON"
          },
          "generator": "Ninja",
          "toolchain": null
        },
        "cuda": {
          "archs": [
            86,
            60,
            75,
            61
          ],
          "cmake_architectures": "60-real;61-real;75-real;86-real",
          "nvcc": "12.4",
          "proven": {
            "bin/ggml-cuda.dll": [
              "sm_60",
              "sm_61",
              "sm_75",
              "sm_86"
            ]
          }
        },
        "pe_edits": [
          {
            "after": {
              "stack_commit": 4096,
              "stack_reserve": 268435456
            },
            "before": {
              "stack_commit": 4096,
              "stack_reserve": 2097152
            },
            "file": "bin/llama-cli.exe"
          }
        ],
        "source_date_epoch": 1786106096,
        "waivers": []
      },
      "resolvedDependencies": [
        {
          "digest": {
            "gitCommit": "82bb48500a9a6b3374da2cf5811695369278e4d3"
          },
          "name": "llama.cpp",
          "uri": "git+https://github.com/ggml-org/llama.cpp@82bb48500a9a6b3374da2cf5811695369278e4d3"
        },
        {
          "digest": {
            "sha256": "abababababababababababababababababababababababababababababababab"
          },
          "name": "recipe:win-cuda",
          "uri": "file:recipes/win-cuda.toml"
        },
        {
          "annotations": {
            "result": "applied"
          },
          "digest": {
            "sha256": "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef"
          },
          "name": "patch:rpc-deserialize-tensor-zero-nbytes",
          "uri": "file:patches/0001-rpc.patch"
        },
        {
          "annotations": {
            "version": "0.1.0"
          },
          "name": "patchkit",
          "uri": "pkg:generic/patchkit@0.1.0"
        },
        {
          "annotations": {
            "version": "GNU 12.2.0"
          },
          "name": "c_compiler",
          "uri": "pkg:generic/c_compiler@GNU%2012.2.0"
        },
        {
          "annotations": {
            "version": "4.8"
          },
          "name": "ccache",
          "uri": "pkg:generic/ccache@4.8"
        },
        {
          "annotations": {
            "version": "4.1.2"
          },
          "name": "cmake",
          "uri": "pkg:generic/cmake@4.1.2"
        },
        {
          "annotations": {
            "version": "GNU 12.2.0"
          },
          "name": "cxx_compiler",
          "uri": "pkg:generic/cxx_compiler@GNU%2012.2.0"
        },
        {
          "annotations": {
            "version": "1.13.0"
          },
          "name": "ninja",
          "uri": "pkg:generic/ninja@1.13.0"
        },
        {
          "annotations": {
            "version": "12.4"
          },
          "name": "nvcc",
          "uri": "pkg:generic/nvcc@12.4"
        }
      ]
    },
    "runDetails": {
      "builder": {
        "id": "urn:patchkit:builder:v1",
        "version": {
          "patchkit": "patchkit 0.1.0"
        }
      },
      "byproducts": [
        {
          "digest": {
            "sha256": "65e499416f6835838e7528ae76df23e3589bd6d7e8d6773a332c4d9efe024eef"
          },
          "name": "manifest.json"
        }
      ],
      "metadata": {
        "invocationId": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
      }
    }
  },
  "predicateType": "https://slsa.dev/provenance/v1",
  "subject": [
    {
      "digest": {
        "sha256": "427559e0d96211c1ffe7d4d329d2bd70def20e34550efb7133faaadb189529c9"
      },
      "name": "llama-82bb485-pk5f3c2a1b-windows-x86_64-cuda12-sm60-61-75-86.zip"
    }
  ]
}
"""


def _build(tmp_path: Path) -> Path:
    return make_build(tmp_path, name="win-cuda", os_name="windows", cuda=True)


def _statement(archive_sha256: str, manifest: bytes) -> bytes:
    """The old statement, for an archive of these bytes (its only host-dependent field: zlib
    may compress differently elsewhere) and this manifest."""
    st: dict[str, Any] = json.loads(OLD_STATEMENT)
    st["subject"][0]["digest"]["sha256"] = archive_sha256
    st["predicate"]["runDetails"]["byproducts"][0]["digest"]["sha256"] = sha256_bytes(manifest)
    return dump_statement(st)


def _dist(tmp_path: Path, manifest: bytes) -> Path:
    """A release folder as the old code wrote it: the fixture's files and ``manifest``."""
    build = _build(tmp_path / "b")
    dist = tmp_path / "dist"
    dist.mkdir()
    members = [
        Member(name=p.relative_to(build).as_posix(), mode=0o755, source=p)
        for p in sorted((build / "bin").iterdir())
    ]
    members.append(Member(name="LICENSE", mode=0o644, source=build / "LICENSE"))
    members.append(Member(name="manifest.json", mode=0o644, data=manifest))
    archive = dist / f"{STEM}.zip"
    digest = write_archive(archive, STEM, members, mtime=json.loads(manifest)["source_date_epoch"])
    (dist / f"{STEM}.manifest.json").write_bytes(manifest)
    (dist / f"{STEM}.intoto.json").write_bytes(_statement(digest, manifest))
    write_sums(dist / SUMS, {p.name: sha256_file(p) for p in dist.iterdir()})
    return dist


def test_the_writer_gives_the_bytes_the_old_code_path_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("patchkit.release.contents.__version__", "0.1.0")  # released_by
    r = do_release(_build(tmp_path), tmp_path / "dist")
    assert r.name == STEM
    assert r.manifest.read_bytes() == OLD_MANIFEST.encode()
    assert (tmp_path / "dist" / f"{STEM}.intoto.json").read_bytes() == _statement(
        r.sha256, OLD_MANIFEST.encode()
    )


def test_an_old_manifest_reads_as_its_record_and_writes_back_the_same_bytes() -> None:
    m = load_manifest(OLD_MANIFEST.encode())
    assert isinstance(m, ReleaseManifest)
    assert m.cuda is not None and m.cuda.archs == (86, 60, 75, 61)
    assert m.cuda.proven["bin/ggml-cuda.dll"] == ("sm_60", "sm_61", "sm_75", "sm_86")
    assert m.pe_edits[0].after.stack_reserve == 268435456
    assert m.smoke is not None and m.smoke.status is SmokeStatus.PASSED
    assert m.smoke.checks[0].status is CheckStatus.PASS
    assert m.imports is not None and m.imports.system == () and m.runtime is None
    assert m.reproducible is not None and m.reproducible.any_folder
    assert dump_manifest(m) == OLD_MANIFEST.encode()


def test_an_old_release_folder_verifies(tmp_path: Path) -> None:
    assert verify_dir(_dist(tmp_path, OLD_MANIFEST.encode())).differences == ()


def test_a_manifest_from_before_the_newer_keys_reads_and_verifies(tmp_path: Path) -> None:
    """Keys added to the manifest since its first version are absent in older releases:
    they read as not recorded, and such a release still verifies."""
    data = json.loads(OLD_MANIFEST)
    for key in ("rpc_protocol", "reproducible", "source", "imports", "runtime"):
        del data[key]
    older = dump_manifest(data)
    m = load_manifest(older)
    assert isinstance(m, ReleaseManifest)
    assert (m.rpc_protocol, m.reproducible, m.source, m.imports, m.runtime) == (None,) * 5
    assert verify_dir(_dist(tmp_path, older)).differences == ()
    # the same release with a tampered field is caught (the test can fail)
    data["series_hash"] = "1" * 64
    diffs = verify_dir(_dist(tmp_path / "t", dump_manifest(data))).differences
    assert any("give the name" in d for d in diffs), diffs
