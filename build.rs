//! Generates the C header from `src/ffi/` with cbindgen into
//! `$OUT_DIR/ratecell.h`. The committed `include/ratecell.h` is compared
//! with it by `tests/header.rs` (refresh: `scripts/update-header.sh`).
//!
//! A cbindgen failure is reported as a warning, never a failed build: the
//! library itself does not need the header, and the header test then fails
//! with the reason.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=build.rs");

    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("ratecell.h");
    if let Err(reason) = generate(&root, &out) {
        println!("cargo:warning=ratecell.h not generated: {reason}");
        // Leave no stale header behind for the test to compare against.
        let _ = std::fs::remove_file(&out);
    }
}

fn generate(root: &std::path::Path, out: &std::path::Path) -> Result<(), String> {
    let mut config = cbindgen::Config::from_file(root.join("cbindgen.toml"))
        .map_err(|e| format!("cbindgen.toml: {e}"))?;
    let version =
        |part: &str| std::env::var(format!("CARGO_PKG_VERSION_{part}")).unwrap_or_default();
    let macros = format!(
        "\n/* The version of the library this header describes (Cargo.toml). */\n#define RATECELL_VERSION_MAJOR {}\n#define RATECELL_VERSION_MINOR {}\n#define RATECELL_VERSION_PATCH {}\n",
        version("MAJOR"),
        version("MINOR"),
        version("PATCH"),
    );
    config.after_includes = Some(macros + config.after_includes.as_deref().unwrap_or(""));
    cbindgen::Builder::new()
        .with_config(config)
        // Only the FFI module: no `cargo metadata`, nothing else parsed.
        .with_src(root.join("src/ffi/mod.rs"))
        .generate()
        .map_err(|e| e.to_string())?
        .write_to_file(out);
    Ok(())
}
