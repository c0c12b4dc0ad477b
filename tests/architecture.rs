//! docs/ARCHITECTURE.md names only paths that exist: every code-quoted
//! token that is a path from the repository's root (its first part a
//! top-level entry of the checkout) matches a file or folder, and every
//! quoted bare file name (`keyed.rs`) names a file somewhere in the tree.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The code-quoted tokens of `text` (between single backticks).
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Whether `pattern` (a path from `base`, `*` matching within one part)
/// names something that exists.
fn exists(base: &Path, pattern: &str) -> bool {
    let mut parts = pattern.trim_end_matches('/').splitn(2, '/');
    let first = parts.next().unwrap_or("");
    let rest = parts.next();
    let candidates: Vec<PathBuf> = if first.contains('*') {
        let (prefix, suffix) = first.split_once('*').expect("a star");
        std::fs::read_dir(base)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| {
                        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                        name.starts_with(prefix) && name.ends_with(suffix)
                    })
                    .collect()
            })
            .unwrap_or_default()
    } else {
        vec![base.join(first)]
    };
    candidates.iter().any(|c| match rest {
        None => c.exists(),
        Some(rest) => exists(c, rest),
    })
}

/// Every file name in the tree, outside build products.
fn file_names(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if matches!(name.as_str(), "target" | ".git" | "node_modules") {
            continue;
        }
        if e.path().is_dir() {
            file_names(&e.path(), out);
        } else {
            out.push(name);
        }
    }
}

#[test]
fn every_path_architecture_md_names_exists() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let top: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = Vec::new();
    file_names(&root, &mut names);
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_.-/*".contains(c);
    let mut missing = Vec::new();
    let mut checked = 0;
    for token in quoted(&text) {
        // `file.rs:42` names a line of a file.
        let token = token.split(':').next().unwrap_or(token);
        if token.is_empty() || !token.chars().all(is_path_char) {
            continue;
        }
        let first = token.split('/').next().unwrap_or("");
        if token.contains('/') && top.iter().any(|t| t == first) {
            checked += 1;
            if !exists(&root, token) {
                missing.push(token.to_string());
            }
        } else if !token.contains('/')
            && [
                ".rs", ".md", ".sh", ".py", ".go", ".h", ".hpp", ".c", ".toml",
            ]
            .iter()
            .any(|ext| token.ends_with(ext))
        {
            checked += 1;
            if !names.iter().any(|n| n == token) {
                missing.push(token.to_string());
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the parser right?"
    );
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}
