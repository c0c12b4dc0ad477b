//! docs/ARCHITECTURE.md names only paths that exist: every code-quoted
//! token that is a path from the repository's root (its first part a
//! top-level entry of the checkout) matches a file or folder, and every
//! quoted bare file name (`keyed.rs`) names a file somewhere in the tree.
//! Its table of the library places every module of `src/` in a layer, and
//! its table of the parts beyond it has a row for every workspace member
//! and binding. A limiter is made only by its builder.

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

/// Every file below `dir`, outside build products.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name();
        if matches!(name.to_str(), Some("target" | ".git" | "node_modules")) {
            continue;
        }
        if e.path().is_dir() {
            files(&e.path(), out);
        } else {
            out.push(e.path());
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
    let mut paths = Vec::new();
    files(&root, &mut paths);
    let names: Vec<String> = paths
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
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

/// Each top-level module of `src/` (`sync` for `src/sync/`, `state` for
/// `src/state.rs`) and its layer, as docs/ARCHITECTURE.md's table of the
/// library gives them.
fn layers(text: &str) -> Vec<(String, u32)> {
    let table = text
        .split("## The library")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("ARCHITECTURE.md has a section on the library");
    let mut out = Vec::new();
    for row in table.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Ok(layer) = cells[1].parse::<u32>() else {
            continue;
        };
        for path in quoted(cells[2]) {
            let module = path
                .strip_prefix("src/")
                .and_then(|p| p.split('/').next())
                .map(|m| m.trim_end_matches(".rs"))
                .expect("a layer's path lies under src/");
            out.push((module.to_string(), layer));
        }
    }
    out
}

/// The modules `crate::module` names in the code of `source` (comments
/// and the test modules at a file's end left out: a test may reach
/// anything).
fn imports(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or(source);
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for (i, _) in line.match_indices("crate::") {
            let rest = &line[i + "crate::".len()..];
            // `crate::{a::X, Y}` names each of its items' first parts.
            let heads: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for head in heads {
                let name: String = head
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // `crate::Name` is a re-export of lib.rs, the top layer.
                let name = if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                    "lib".to_string()
                } else {
                    name
                };
                if !name.is_empty() && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

#[test]
fn every_module_imports_only_lower_layers() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let layers = layers(&text);
    let layer_of = |m: &str| layers.iter().find(|(n, _)| n == m).map(|(_, l)| *l);
    let src = root.join("src");
    let mut sources = Vec::new();
    files(&src, &mut sources);
    sources.retain(|f| f.extension().is_some_and(|x| x == "rs"));
    let mut unplaced = Vec::new();
    let mut upward = Vec::new();
    for file in &sources {
        let relative = file.strip_prefix(&src).unwrap();
        // A test module's own file (`lease/tests.rs`) may reach anything.
        if relative.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let module = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|m| m.trim_end_matches(".rs").to_string())
            .unwrap();
        let Some(own) = layer_of(&module) else {
            unplaced.push(module);
            continue;
        };
        let source = std::fs::read_to_string(file).unwrap();
        for used in imports(&source) {
            // `crate::spec` is the specification's page, no code.
            if used == module || used == "spec" {
                continue;
            }
            match layer_of(&used) {
                Some(l) if l < own => {}
                _ => upward.push(format!("{} ({own}) -> {used}", relative.display())),
            }
        }
    }
    unplaced.dedup();
    assert!(
        unplaced.is_empty(),
        "modules with no layer in docs/ARCHITECTURE.md: {unplaced:?}"
    );
    assert!(sources.len() > 50, "only {} files read", sources.len());
    assert!(
        upward.is_empty(),
        "imports of a module not below the importer's layer: {upward:#?}"
    );
}

/// The code-quoted paths of the table that follows `heading` in `text`
/// (the rows' second cells), each with its row's first cell.
fn table_paths<'a>(text: &'a str, heading: &str) -> Vec<(&'a str, &'a str)> {
    let table = text
        .split(heading)
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has a section {heading:?}"));
    let mut out = Vec::new();
    for row in table.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for path in quoted(cells[2]) {
            out.push((cells[1], path));
        }
    }
    out
}

/// What must be on the map beyond `src/`: each workspace member but the
/// root package, each folder of `bindings/`, each folder of `bindings/go/`
/// that holds a Go package or module, and each public module of the
/// Python package; as paths from the root, folders ending in `/`.
fn parts_beyond_the_library(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|m| m.split(']').next())
        .expect("Cargo.toml lists the workspace's members");
    let mut out: Vec<String> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty() && *m != ".")
        .map(|m| format!("{m}/"))
        .collect();
    let dirs = |dir: &str| -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        found.sort();
        found
    };
    let relative = |p: &Path| p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
    for dir in dirs("bindings") {
        out.push(format!("{}/", relative(&dir)));
    }
    for dir in dirs("bindings/go") {
        let go = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.ends_with(".go") || name == "go.mod"
            });
        if go {
            out.push(format!("{}/", relative(&dir)));
        }
    }
    let package = root.join("bindings/python/src/ratecell");
    for e in std::fs::read_dir(&package).unwrap().filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".py") && !name.starts_with('_') {
            out.push(relative(&e.path()));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_workspace_member_and_binding_is_on_the_map() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let rows = table_paths(&text, "## The parts beyond the library");
    let mapped: Vec<String> = rows
        .iter()
        .map(|(_, p)| {
            let p = p.trim_end_matches('/');
            if root.join(p).is_dir() {
                format!("{p}/")
            } else {
                p.to_string()
            }
        })
        .collect();
    // A path named on the map exists (the test above checks every quoted
    // path; this one names the row whose path is wrong).
    let missing: Vec<String> = rows
        .iter()
        .filter(|(_, p)| !exists(&root, p))
        .map(|(part, p)| format!("{part}: {p}"))
        .collect();
    assert!(
        missing.is_empty(),
        "rows of the map whose paths do not exist: {missing:?}"
    );
    let parts = parts_beyond_the_library(&root);
    assert!(
        parts.len() >= 15,
        "only {} parts found: is the walk right? {parts:?}",
        parts.len()
    );
    let unmapped: Vec<&String> = parts.iter().filter(|p| !mapped.contains(p)).collect();
    assert!(
        unmapped.is_empty(),
        "parts with no row in docs/ARCHITECTURE.md, \"The parts beyond the library\": {unmapped:?}"
    );
}

/// The public functions of `source` that hand out a limiter (return a
/// `Limiter`, `KeyedLimiter` or `AnyLimiter`, or a `Result` of one), by
/// name: each signature read from `pub fn` to its body's `{`.
fn limiter_makers(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in source.match_indices("pub fn ") {
        let signature = &source[at..];
        let signature = &signature[..signature.find('{').unwrap_or(signature.len())];
        let Some((_, returned)) = signature.split_once("->") else {
            continue;
        };
        let returned = returned.trim();
        let returned = returned.strip_prefix("Result<").unwrap_or(returned);
        let made = ["Limiter", "KeyedLimiter", "AnyLimiter"].iter().any(|t| {
            returned.starts_with(t) && !returned[t.len()..].starts_with(char::is_alphanumeric)
        });
        if made {
            let name = signature["pub fn ".len()..]
                .split(['(', '<'])
                .next()
                .unwrap_or("");
            out.push(name.to_string());
        }
    }
    out
}

/// A limiter is made one way: its builder's `build` (`src/builder.rs`).
/// Every other public function of the library returning one would be a
/// second constructor, the family the builder replaced.
#[test]
fn limiters_are_made_only_by_their_builder() {
    let mut sources = Vec::new();
    files(&root().join("src"), &mut sources);
    let mut makers = Vec::new();
    for path in sources
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(path).expect("a source file");
        let rel = path.strip_prefix(root()).expect("below the root");
        for name in limiter_makers(&text) {
            makers.push(format!("{}: {name}", rel.display()));
        }
    }
    assert_eq!(
        makers, ["src/builder.rs: build"; 3],
        "only the builder's three `build`s (direct, keyed, any) make a limiter"
    );
    // The scan sees a constructor, so the assertion above can fail.
    assert_eq!(
        limiter_makers(
            "impl Limiter {\n    pub fn new(config: Config) -> Result<Limiter, Error> {"
        ),
        ["new"]
    );
}
