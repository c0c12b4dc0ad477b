"""Build hook of the ratecell Python package (metadata is in pyproject.toml).

`pip install ./bindings/python` (and `pip install -e`) runs
`cargo build --release --lib` in the repository root and bundles the shared
library it produces inside the package, so users need no other step. The
wheel holds no Python extension module, only a library loaded with ctypes:
it is tagged `py3-none-<platform>` (any Python 3, this platform).

Needs cargo on PATH (or in $CARGO) and the repository checkout around this
directory: an sdist on its own cannot build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1 keeps it in the wheel package
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PACKAGE = "ratecell"

if sys.platform == "darwin":
    LIBRARY_NAME = "libratecell.dylib"
elif sys.platform == "win32":
    LIBRARY_NAME = "ratecell.dll"
else:
    LIBRARY_NAME = "libratecell.so"


def build_library() -> Path:
    """Runs cargo in the repository root; returns the built library's path,
    as cargo reports it (so CARGO_TARGET_DIR and cargo config are honoured)."""
    if not (ROOT / "Cargo.toml").is_file():
        raise SystemExit(
            f"ratecell: no Cargo.toml in {ROOT}: the Python package builds the library from "
            "the ratecell repository; install it from a checkout (pip install ./bindings/python)"
        )
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--release", "--lib", "--message-format=json-render-diagnostics"]
    print("ratecell: " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        # stdout carries cargo's JSON messages; its progress and compiler
        # diagnostics go to stderr, which pip shows with -v or on failure.
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    except FileNotFoundError:
        raise SystemExit(
            f"ratecell: `{cargo}` not found; install Rust (https://rustup.rs) to build the library"
        ) from None
    if proc.returncode != 0:
        raise SystemExit(f"ratecell: cargo build failed with status {proc.returncode}")
    found: Path | None = None
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        target = msg.get("target") or {}
        if (
            msg.get("reason") == "compiler-artifact"
            and target.get("name") == PACKAGE
            and "cdylib" in target.get("crate_types", [])
        ):
            for name in msg.get("filenames", []):
                if Path(name).name == LIBRARY_NAME:
                    found = Path(name)
    if found is None or not found.is_file():
        raise SystemExit(f"ratecell: cargo build reported no {LIBRARY_NAME}")
    return found


def install_library(library: Path, directory: Path) -> Path:
    """Copies the library into `directory` by rename, never by rewriting
    the file in place: a process that has the old copy mapped keeps it."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / LIBRARY_NAME
    fd, tmp = tempfile.mkstemp(prefix=".ratecell-", dir=directory)
    os.close(fd)
    try:
        shutil.copy2(library, tmp)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise
    return dest


class build_py(_build_py):
    """build_py plus the Rust library, bundled next to the package's
    modules (in place for an editable install, as build_ext --inplace does
    for extension modules)."""

    def run(self) -> None:
        super().run()
        library = build_library()
        if getattr(self, "editable_mode", False):
            install_library(library, HERE / "src" / PACKAGE)
        else:
            install_library(library, Path(self.build_lib) / PACKAGE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs.append(str(Path(self.build_lib) / PACKAGE / LIBRARY_NAME))
        return outputs


class bdist_wheel(_bdist_wheel):
    """A platform wheel (it holds a native library) for any Python 3."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"build_py": build_py, "bdist_wheel": bdist_wheel})
