"""Build of the ratecell Python package (its metadata is in pyproject.toml).

The package is Python over ctypes plus one native library, ratecell's C ABI.
setuptools-rust builds that library with cargo as a plain cdylib
(``Binding.NoBinding``: no Python extension module, nothing linked against
libpython) and bundles it inside the package, named like an extension
module (``ratecell/libratecell.cpython-311-x86_64-linux-gnu.so``);
``ratecell._ffi`` finds it there. It is built with the workspace's ``dist``
profile (LTO, one codegen unit, symbols stripped; the exported C functions
stay), as the installed C library is: into target/dist, so that a ``pip
install`` and the ``cargo build --release -p ratecell-capi`` of the other
bindings' tests keep their own builds instead of recompiling the C library
over each other's (a profile apart, a different command line cannot
invalidate the other's build).

Where the Rust crates are (the C library is the ``ratecell-capi`` crate, whose
library is named ``ratecell``; it depends on the ``ratecell`` crate):

- in a checkout: ``../../crates/ratecell-capi/Cargo.toml``, in the
  repository's workspace;
- in an sdist: ``rust/``, a small workspace that the sdist command below
  generates: ``rust/ratecell/`` and ``rust/ratecell-capi/``, each exactly as
  ``cargo package`` ships it (its own sources, header, licences), a
  ``Cargo.toml`` whose ``[patch.crates-io]`` points the C library's
  ``ratecell`` dependency at ``rust/ratecell/``, and a ``Cargo.lock`` (the
  repository's, trimmed by cargo offline). So the sdist builds anywhere
  cargo exists, with nothing fetched but the locked crates.io dependencies.

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
import re
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
# The crates' workspace inside an sdist (see the module docstring).
SDIST_CRATE = "rust"
# The crate of the C library, in a checkout and in an sdist's workspace.
CAPI = "ratecell-capi"
# The crates an sdist carries: the C library's, and the library it calls.
SDIST_PACKAGES = ("ratecell", CAPI)
# The cargo profile the library is built with (the workspace Cargo.toml's).
DIST_PROFILE = "dist"


def dist_profile_section() -> str:
    """The repository Cargo.toml's ``[profile.dist]`` table, verbatim, for
    the sdist's workspace (a profile lives in the workspace's manifest,
    which ``cargo package`` does not ship)."""
    text = (REPO / "Cargo.toml").read_text()
    match = re.search(rf"^\[profile\.{DIST_PROFILE}\]\n(?:[^\[\n#].*\n)*", text, re.M)
    if match is None:
        raise SystemExit(f"ratecell: no [profile.{DIST_PROFILE}] in {REPO / 'Cargo.toml'}")
    return match.group(0)


def crate_manifest() -> str:
    """The Cargo.toml of the C library's crate, relative to this directory
    (setuptools-rust runs from here): the sdist's copy when there is one,
    else the checkout's."""
    if (HERE / SDIST_CRATE / CAPI / "Cargo.toml").is_file():
        return f"{SDIST_CRATE}/{CAPI}/Cargo.toml"
    checkout = REPO / "crates" / CAPI / "Cargo.toml"
    if checkout.is_file():
        return os.path.relpath(checkout, HERE)
    raise SystemExit(
        f"ratecell: no Rust crate found: neither {HERE / SDIST_CRATE / CAPI / 'Cargo.toml'} "
        f"(an sdist) nor {checkout} (a checkout of the repository)"
    )


def run_cargo(args: list[str], what: str, stdout=sys.stderr) -> None:
    """Runs cargo in the repository, its output to stderr (or `stdout`)."""
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, *args]
    print("ratecell: " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        subprocess.run(cmd, cwd=REPO, check=True, stdout=stdout)
    except FileNotFoundError:
        raise SystemExit(
            f"ratecell: `{cargo}` not found; install Rust (https://rustup.rs) to make an sdist"
        ) from None
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"ratecell: {what} failed with status {e.returncode}") from None


def extract_crate(crate: Path, dest: Path) -> None:
    """Unpacks a `.crate` file's top directory into `dest`."""
    with tarfile.open(crate) as archive:
        top = crate.name.removesuffix(".crate") + "/"
        members = []
        for member in archive.getmembers():
            if not member.name.startswith(top) or not (member.isfile() or member.isdir()):
                raise SystemExit(f"ratecell: unexpected entry {member.name!r} in {crate}")
            member.name = member.name[len(top) :]
            if member.name:
                members.append(member)
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
            archive.extractall(dest, members=members, filter="data")
        else:
            archive.extractall(dest, members=members)  # names checked above


def package_crates(dest: Path) -> None:
    """Puts the C library's crate and the library it calls into `dest`,
    each as `cargo package` ships it to crates.io (the files its
    Cargo.toml's `include` names, a manifest that stands alone), in a
    workspace of their own with a Cargo.lock."""
    with tempfile.TemporaryDirectory(prefix="ratecell-package-") as tmp:
        # Packaged together, so the C library's `ratecell` is this one.
        args = ["package", "--no-verify", "--allow-dirty", "--target-dir", tmp]
        for name in SDIST_PACKAGES:
            args += ["-p", name]
        run_cargo(args, "cargo package")
        for name in SDIST_PACKAGES:
            crates = sorted((Path(tmp) / "package").glob(f"{name}-[0-9]*.crate"))
            if len(crates) != 1:
                raise SystemExit(
                    f"ratecell: cargo package made {len(crates)} {name} crates, not one"
                )
            extract_crate(crates[0], dest / name)
            # The workspace's Cargo.lock is the one cargo reads.
            (dest / name / "Cargo.lock").unlink(missing_ok=True)
    members = ", ".join(f'"{name}"' for name in SDIST_PACKAGES)
    # Its own workspace: wherever the sdist is unpacked, cargo must not take
    # a Cargo.toml in a parent directory for this one's. The packaged C
    # library depends on `ratecell` from crates.io; the patch makes it the
    # copy beside it, so the two are always the same version of the source.
    (dest / "Cargo.toml").write_text(
        "# Generated by bindings/python/setup.py for the sdist: the C library\n"
        "# (ratecell-capi) and the ratecell crate it calls, as cargo package\n"
        "# ships them.\n"
        f"[workspace]\nmembers = [{members}]\nresolver = \"3\"\n\n"
        '[patch.crates-io]\nratecell = { path = "ratecell" }\n\n'
        + dist_profile_section()
    )
    # The repository's lock, which cargo trims to this workspace offline:
    # the sdist builds with the versions the repository was tested with.
    shutil.copyfile(REPO / "Cargo.lock", dest / "Cargo.lock")
    run_cargo(
        [
            "metadata",
            "--offline",
            "--format-version",
            "1",
            "--manifest-path",
            str((dest / "Cargo.toml").resolve()),
        ],
        "cargo metadata (trimming the sdist's Cargo.lock)",
        stdout=subprocess.DEVNULL,
    )


class sdist(_sdist):
    """The sdist plus the Rust crates' workspace under ``rust/``."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / SDIST_CRATE
        if dest.exists():
            shutil.rmtree(dest)
        if (HERE / SDIST_CRATE / CAPI / "Cargo.toml").is_file():
            # An sdist made from an sdist.
            shutil.copytree(HERE / SDIST_CRATE, dest, ignore=shutil.ignore_patterns("target"))
        else:
            dest.mkdir(parents=True)
            package_crates(dest)


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
            # An optimised build even for `pip install -e` (an editable
            # install would otherwise get a debug build); the profile is
            # the workspace's, and the sdist's workspace carries a copy.
            debug=False,
            args=["--profile", DIST_PROFILE],
        )
    ],
    cmdclass={"sdist": sdist, "bdist_wheel": bdist_wheel},
    zip_safe=False,
)
