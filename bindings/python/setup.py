"""Build of the ratecell Python package (its metadata is in pyproject.toml).

The package is Python over ctypes plus one native library, ratecell's C ABI.
setuptools-rust builds that library with cargo as a plain cdylib
(``Binding.NoBinding``: no Python extension module, nothing linked against
libpython) and bundles it inside the package, named like an extension
module (``ratecell/libratecell.cpython-311-x86_64-linux-gnu.so``);
``ratecell._ffi`` finds it there. Symbols are stripped (``-C strip=symbols``
keeps the exported C functions).

Where the Rust crate is:

- in a checkout: the repository root, ``../../Cargo.toml``;
- in an sdist: ``rust/``, the crate exactly as ``cargo package`` ships it
  (its own sources, ``Cargo.lock``, header and licences), which the sdist
  command below copies in. So the sdist builds anywhere cargo exists.

setuptools-rust rather than maturin: maturin treats a cdylib without PyO3 as
a cffi module (it generates a cffi wrapper and needs cffi at run time), while
this package loads the library with ctypes and needs nothing.

One small C extension module, ``ratecell._speedups``, runs the hot calls
(``Limiter.check`` and ``allow``) without ctypes. It is not linked against
the library (``ratecell._ffi`` hands it the functions' addresses at import),
and it is built for the stable ABI of CPython 3.10 (``_speedups.abi3.so``),
which every CPython from 3.10 on loads. It is optional: where it cannot be
built or loaded (no C compiler, PyPy, a free-threaded build), the package
runs on ctypes alone, as fast as before.

So the wheel stays tagged ``py3-none-<platform>`` (any Python 3.10+: on
CPython with the extension, elsewhere without); ``auditwheel repair`` turns
the platform into a manylinux tag (scripts/python-tests.sh checks it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.sdist import sdist as _sdist
from setuptools_rust import Binding, RustExtension

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1 keeps it in the wheel package
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
# The crate inside an sdist (see the module docstring).
SDIST_CRATE = "rust"


def crate_manifest() -> str:
    """The Cargo.toml to build, relative to this directory (setuptools-rust
    runs from here): the sdist's copy when there is one, else the checkout's."""
    if (HERE / SDIST_CRATE / "Cargo.toml").is_file():
        return f"{SDIST_CRATE}/Cargo.toml"
    if (REPO / "Cargo.toml").is_file():
        return os.path.relpath(REPO / "Cargo.toml", HERE)
    raise SystemExit(
        f"ratecell: no Rust crate found: neither {HERE / SDIST_CRATE / 'Cargo.toml'} (an sdist) "
        f"nor {REPO / 'Cargo.toml'} (a checkout of the repository)"
    )


def package_crate(dest: Path) -> None:
    """Puts the crate into `dest` as `cargo package` ships it to crates.io:
    the files Cargo.toml's `include` names, a Cargo.lock, and a manifest
    that stands alone (no workspace members, no targets whose files are not
    shipped)."""
    cargo = os.environ.get("CARGO", "cargo")
    with tempfile.TemporaryDirectory(prefix="ratecell-package-") as tmp:
        cmd = [
            cargo,
            "package",
            "-p",
            "ratecell",
            "--no-verify",
            "--allow-dirty",
            "--target-dir",
            tmp,
        ]
        print("ratecell: " + " ".join(cmd), file=sys.stderr, flush=True)
        try:
            subprocess.run(cmd, cwd=REPO, check=True, stdout=sys.stderr)
        except FileNotFoundError:
            raise SystemExit(
                f"ratecell: `{cargo}` not found; install Rust (https://rustup.rs) to make an sdist"
            ) from None
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"ratecell: cargo package failed with status {e.returncode}") from None
        crates = sorted((Path(tmp) / "package").glob("ratecell-*.crate"))
        if len(crates) != 1:
            raise SystemExit(f"ratecell: cargo package made {len(crates)} .crate files, not one")
        with tarfile.open(crates[0]) as archive:
            top = crates[0].name.removesuffix(".crate") + "/"
            members = []
            for member in archive.getmembers():
                if not member.name.startswith(top) or not (member.isfile() or member.isdir()):
                    raise SystemExit(f"ratecell: unexpected entry {member.name!r} in {crates[0]}")
                member.name = member.name[len(top) :]
                if member.name:
                    members.append(member)
            if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
                archive.extractall(dest, members=members, filter="data")
            else:
                archive.extractall(dest, members=members)  # names checked above
    manifest = dest / "Cargo.toml"
    # Its own workspace: wherever the sdist is unpacked, cargo must not
    # take a Cargo.toml in a parent directory for this crate's workspace.
    manifest.write_text(manifest.read_text() + "\n[workspace]\n")


class sdist(_sdist):
    """The sdist plus the Rust crate under ``rust/``."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / SDIST_CRATE
        if dest.exists():
            shutil.rmtree(dest)
        if (HERE / SDIST_CRATE / "Cargo.toml").is_file():
            # An sdist made from an sdist.
            shutil.copytree(HERE / SDIST_CRATE, dest, ignore=shutil.ignore_patterns("target"))
        else:
            dest.mkdir(parents=True)
            package_crate(dest)


class bdist_wheel(_bdist_wheel):
    """A platform wheel (it holds a native library) for any Python 3: the
    library is loaded with ctypes, not imported by the interpreter."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


# gcc and clang; MSVC takes its own flags and warns by default.
WARNINGS = [] if sys.platform == "win32" else ["-Wall", "-Wextra"]
# The module calls nothing of libc itself, so a linker with --as-needed
# (Debian's default) records no libc dependency, and auditwheel refuses an
# extension module whose libc it cannot tell (glibc or musl).
LINK_LIBC = ["-Wl,--no-as-needed", "-lc"] if sys.platform.startswith("linux") else []

setup(
    ext_modules=[
        Extension(
            "ratecell._speedups",
            ["src/ratecell/_speedups.c"],
            py_limited_api=True,
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            extra_compile_args=WARNINGS,
            extra_link_args=LINK_LIBC,
            # Without a compiler the package still works, on ctypes alone.
            optional=True,
        )
    ],
    rust_extensions=[
        RustExtension(
            "ratecell.libratecell",
            path=crate_manifest(),
            binding=Binding.NoBinding,
            # A release build even for `pip install -e` (an editable
            # install would otherwise get a debug build).
            debug=False,
            rustc_flags=["-C", "strip=symbols"],
        )
    ],
    cmdclass={"sdist": sdist, "bdist_wheel": bdist_wheel},
    zip_safe=False,
)
