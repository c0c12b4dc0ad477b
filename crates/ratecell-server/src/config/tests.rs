use super::*;

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::from_files(&[("config.yaml".to_owned(), yaml.to_owned())], false)
}

fn rule_of(c: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
    c.lookup(domain, entries.iter().map(|(k, v)| (*k, *v)))
        .map(|m| m.rule.path.clone())
}

const NESTED: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 5, name: login}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plan
    value: gold
    rate_limit: {algorithm: gcra, period: 10s, requests_per_unit: 100, burst: 20}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1000, replaces: [{name: login}]}
"#;

#[test]
fn descriptors_match_as_the_incumbents() {
    let c = load(NESTED).unwrap();
    assert_eq!(
        rule_of(&c, "edge", &[("remote_address", "1.2.3.4")]).as_deref(),
        Some("edge.remote_address")
    );
    assert_eq!(
        rule_of(&c, "edge", &[("path", "/login")]).as_deref(),
        Some("edge.path_/login")
    );
    assert_eq!(
        rule_of(&c, "edge", &[("path", "/other")]),
        None,
        "no rule for the bare key"
    );
    assert_eq!(
        rule_of(&c, "edge", &[("path", "/api/users")]).as_deref(),
        Some("edge.path_/api/*")
    );
    assert_eq!(
        rule_of(&c, "edge", &[("plan", "gold")]).as_deref(),
        Some("edge.plan_gold")
    );
    assert_eq!(
        rule_of(&c, "edge", &[("plan", "gold"), ("user", "u1")]).as_deref(),
        Some("edge.plan_gold.user")
    );
    assert_eq!(
        rule_of(&c, "edge", &[("plan", "gold"), ("user", "u1"), ("x", "y")]),
        None,
        "deeper than the tree"
    );
    assert_eq!(
        rule_of(&c, "other", &[("path", "/login")]),
        None,
        "unknown domain"
    );
}

#[test]
fn shared_wildcards_count_under_their_pattern() {
    let c = load(NESTED).unwrap();
    let m = c
        .lookup("edge", [("path", "/api/users")].into_iter())
        .unwrap();
    assert_eq!(m.shared_values, vec![Some("/api/*".to_owned())]);
    assert_eq!(m.stats_key, "edge.path_/api/*");
}

#[test]
fn extensions_make_ratecell_limits() {
    let c = load(NESTED).unwrap();
    let m = c.lookup("edge", [("plan", "gold")].into_iter()).unwrap();
    let l = m.rule.limit.as_ref().unwrap();
    let cfg = l.config.unwrap();
    assert_eq!(cfg.algorithm, ratecell::Algorithm::Gcra);
    assert_eq!(
        (cfg.limit, cfg.period_ns, cfg.burst),
        (100, 10_000_000_000, 20)
    );
    assert_eq!(l.unit, Unit::Unknown, "10 s is no unit");
    let m = c.lookup("edge", [("path", "/login")].into_iter()).unwrap();
    let l = m.rule.limit.as_ref().unwrap();
    assert_eq!(
        (l.unit, l.config.unwrap().algorithm),
        (Unit::Minute, ratecell::Algorithm::FixedWindow)
    );
}

#[test]
fn bad_files_name_the_file_and_the_fault() {
    for (yaml, says) in [
        ("descriptors: []", "empty domain"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}",
            "invalid rate limit unit 'fortnight'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unti: second}",
            "unknown field `unti`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n  - key: k",
            "duplicate descriptor composite key 'd.k'",
        ),
        (
            "domain: d\ndescriptors:\n  - value: v",
            "descriptor has empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    share_threshold: true",
            "share_threshold can only be used with wildcard",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, period: 1s}",
            "give unit or period",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: 5, requests_per_unit: 1}",
            "period",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: 1s, requests_per_unit: 1, algorithm: lottery}",
            "algorithm 'lottery'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}",
            "burst is not a parameter of fixed_window",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}",
            "replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\nforward_auth:\n  descriptors: [[{key: k, from: cookie}]]",
            "from \"cookie\"",
        ),
        (
            "domain: d\nforward_auth:\n  descriptors: [[{key: k, from: path}]]\n  deny_status: 200",
            "deny_status",
        ),
        (
            "domain: d\nforward_auth:\n  descriptors: [[{key: k, from: path}]]\n  trusted_proxies: [10.0.0.0/40]",
            "trusted_proxies",
        ),
        (": : :", "error loading config file"),
    ] {
        let e = load(yaml).unwrap_err();
        assert_eq!(e.file, "config.yaml");
        assert!(e.message.contains(says), "{yaml:?} gave {e}");
    }
}

#[test]
fn a_domain_twice_is_refused_unless_merged() {
    let a = (
        "a.yaml".to_owned(),
        "domain: d\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1}"
            .to_owned(),
    );
    let b = (
        "b.yaml".to_owned(),
        "domain: d\ndescriptors:\n  - key: y\n    rate_limit: {unit: second, requests_per_unit: 1}"
            .to_owned(),
    );
    let e = Config::from_files(&[a.clone(), b.clone()], false).unwrap_err();
    assert_eq!(e.file, "b.yaml");
    assert!(e.message.contains("duplicate domain 'd'"), "{e}");
    let c = Config::from_files(&[a, b], true).unwrap();
    assert!(rule_of(&c, "d", &[("x", "1")]).is_some() && rule_of(&c, "d", &[("y", "1")]).is_some());
}

#[test]
fn numbers_as_values_are_strings() {
    let c = load("domain: d\ndescriptors:\n  - key: code\n    value: 200\n    rate_limit: {unit: second, requests_per_unit: 1}").unwrap();
    assert_eq!(
        rule_of(&c, "d", &[("code", "200")]).as_deref(),
        Some("d.code_200")
    );
}

#[test]
fn the_example_directory_and_the_docs_files_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let c = Config::load_dir(&root.join("examples/config"), false, false).unwrap();
    assert!(
        c.domain("edge")
            .and_then(|d| d.forward_auth.as_ref())
            .is_some()
    );
    let doc = std::fs::read_to_string(root.join("../../docs/SERVER.md")).unwrap();
    let mut blocks = 0;
    for block in doc.split("```yaml\n").skip(1) {
        let yaml = block.split("```").next().unwrap();
        if yaml.starts_with("domain:") {
            load(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
            blocks += 1;
        }
    }
    assert!(
        blocks >= 3,
        "docs/SERVER.md's configuration examples: {blocks}"
    );
}
