//! The committed C header (`include/ratecell.h` at the repository's root)
//! is the one cbindgen generates from this crate's `src/` (with
//! `cbindgen.toml`), and its version macros match Cargo.toml, this crate's
//! and the ratecell library's.
//!
//! cbindgen is a dev-dependency and runs here, in the test, not in a build
//! script: building the C library never compiles it, while every `cargo
//! test` still checks the committed header.
//!
//! Refresh the committed header with `scripts/update-header.sh` (which
//! runs this test with `RATECELL_UPDATE_HEADER=1`: the test then writes the
//! generated header to `include/ratecell.h` instead of comparing).

use std::path::Path;
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The repository's root: the header stays there, where C programs and the
/// scripts include it from.
const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../include/ratecell.h");

/// The header cbindgen makes from `src/` now, with the
/// `RATECELL_VERSION_*` macros of this package's version.
fn generated() -> &'static str {
    static HEADER: OnceLock<String> = OnceLock::new();
    HEADER.get_or_init(|| {
        let root = Path::new(ROOT);
        let mut config = cbindgen::Config::from_file(root.join("cbindgen.toml"))
            .unwrap_or_else(|e| panic!("cbindgen.toml: {e}"));
        let macros = format!(
            "\n/* The version of the library this header describes (Cargo.toml). */\n#define RATECELL_VERSION_MAJOR {}\n#define RATECELL_VERSION_MINOR {}\n#define RATECELL_VERSION_PATCH {}\n",
            env!("CARGO_PKG_VERSION_MAJOR"),
            env!("CARGO_PKG_VERSION_MINOR"),
            env!("CARGO_PKG_VERSION_PATCH"),
        );
        config.after_includes = Some(macros + config.after_includes.as_deref().unwrap_or(""));
        let mut out = Vec::new();
        cbindgen::Builder::new()
            .with_config(config)
            // Only the FFI module: no `cargo metadata`, nothing else parsed.
            .with_src(root.join("src/lib.rs"))
            .generate()
            .unwrap_or_else(|e| panic!("cbindgen could not generate the header: {e}"))
            .write(&mut out);
        String::from_utf8(out).expect("cbindgen wrote UTF-8")
    })
}

#[test]
fn committed_header_is_the_generated_one() {
    let generated = generated();
    if std::env::var_os("RATECELL_UPDATE_HEADER").is_some() {
        std::fs::write(COMMITTED, generated).expect("write include/ratecell.h");
        return;
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "include/ratecell.h is out of date with crates/ratecell-capi/src/ (first difference at line {}).\n\
             Refresh it with: scripts/update-header.sh\n\
             (or: RATECELL_UPDATE_HEADER=1 cargo test -p ratecell-capi --test header)\n\
             committed: {:?}\n\
             generated: {:?}",
            first + 1,
            committed.lines().nth(first).unwrap_or("<end of file>"),
            generated.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

/// The value of `#define NAME value` in `header`.
fn define(header: &str, name: &str) -> Option<String> {
    header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("#define") && words.next() == Some(name))
            .then(|| words.next().unwrap_or("").to_owned())
    })
}

#[test]
fn version_macros_match_cargo_toml() {
    let expected = [
        ("RATECELL_VERSION_MAJOR", env!("CARGO_PKG_VERSION_MAJOR")),
        ("RATECELL_VERSION_MINOR", env!("CARGO_PKG_VERSION_MINOR")),
        ("RATECELL_VERSION_PATCH", env!("CARGO_PKG_VERSION_PATCH")),
    ];
    // Read Cargo.toml itself too, not only the compile-time copy of it.
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("a `version = \"...\"` line in Cargo.toml");
    // The C library is the Rust library's ABI: one version for both.
    let library =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml"))
            .unwrap();
    assert!(
        library
            .lines()
            .any(|l| l == format!("version = \"{version}\"")),
        "ratecell-capi's version {version} is not the ratecell library's (the root Cargo.toml)"
    );
    let parts: Vec<&str> = version.split(['.', '-', '+']).take(3).collect();
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    for (text, which) in [
        (committed.as_str(), "committed"),
        (generated(), "generated"),
    ] {
        for (i, (name, value)) in expected.iter().enumerate() {
            let found = define(text, name);
            assert_eq!(
                found.as_deref(),
                Some(*value),
                "{which} header: {name} (refresh with scripts/update-header.sh)"
            );
            assert_eq!(
                found.as_deref(),
                Some(parts[i]),
                "{name} vs Cargo.toml {version}"
            );
        }
    }
    // ratecell_version() returns CARGO_PKG_VERSION: a unit test in
    // src/lib.rs checks it (this test cannot link the C library).
}

#[test]
fn header_declares_every_spec_symbol() {
    let header = generated();
    for symbol in [
        "typedef struct ratecell_limiter ratecell_limiter;",
        "struct ratecell_config {",
        "struct ratecell_decision {",
        "struct ratecell_stats {",
        "RATECELL_ALGORITHM_GCRA = 1,",
        "RATECELL_ALGORITHM_SLIDING_LOG = 7,",
        "RATECELL_OVERFLOW_DENY = 0,",
        "RATECELL_OVERFLOW_ALLOW = 1,",
        "RATECELL_OK = 0,",
        "#ifndef RATECELL_H",
        "do not edit",
        "void ratecell_config_init(struct ratecell_config *cfg,",
        "ratecell_status ratecell_limiter_new(const struct ratecell_config *cfg,",
        "void ratecell_limiter_free(struct ratecell_limiter *limiter);",
        "struct ratecell_request {",
        "struct ratecell_batch {",
        "#define RATECELL_NOW UINT64_MAX",
        "void ratecell_request_init(struct ratecell_request *request);",
        "void ratecell_batch_init(struct ratecell_batch *batch);",
        "ratecell_status ratecell_check(",
        "ratecell_status ratecell_check_each(",
        "ratecell_status ratecell_check_batch(",
        "ratecell_status ratecell_allow(const struct ratecell_limiter *limiter, uint64_t key);",
        "ratecell_status ratecell_acquire(",
        "ratecell_status ratecell_limiter_build(",
        "uint64_t ratecell_now_ns(const struct ratecell_limiter *limiter);",
        "ratecell_status ratecell_reset(",
        "ratecell_status ratecell_stats(",
        "const char *ratecell_status_str(ratecell_status status);",
        "const char *ratecell_version(void);",
    ] {
        assert!(header.contains(symbol), "the header lacks `{symbol}`");
    }
    // SPEC's config fields, in SPEC order.
    let config = &header[header.find("struct ratecell_config {").unwrap()..];
    let config = &config[..config.find("};").unwrap()];
    let fields: Vec<&str> = config
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && l.ends_with(';'))
        .collect();
    assert_eq!(
        &fields[..7],
        [
            "ratecell_algorithm algorithm;",
            "uint64_t limit;",
            "uint64_t period_ns;",
            "uint64_t burst;",
            "uint32_t sub_windows;",
            "uint64_t capacity;",
            "uint32_t overflow;",
        ]
    );
}
