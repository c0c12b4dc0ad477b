//! The configuration: a directory of YAML files, each a domain's tree of
//! descriptors, compiled into [`Config`], which answers "which rule does
//! this descriptor fall under" ([`lookup`]). A file that cannot be used is
//! an error naming the file and the descriptor; the whole directory is
//! refused then, and the caller keeps the configuration it had.

mod file;
pub mod lookup;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderName, StatusCode};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use ratecell::{Algorithm, Config as LimitConfig, parse_duration};
use ratecell_tower::{Cidr, TrustedProxies};

use file::{FileDescriptor, FileForwardAuth, FileRateLimit, FileRoot};

/// A rule's limit, as ratecell decides it and as the response reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The algorithm, limit, period and burst. `None` for
    /// `requests_per_unit: 0`, which denies every request (ratecell's
    /// limits start at 1).
    pub config: Option<LimitConfig>,
    /// `current_limit.requests_per_unit`.
    pub requests_per_unit: u32,
    /// `current_limit.unit`: the unit, or for a `period` that is one,
    /// that unit; otherwise `UNKNOWN`.
    pub unit: Unit,
    pub period_ns: u64,
}

/// A configured limit and how it is reported.
#[derive(Debug)]
pub struct Rule {
    /// `domain.key_value.key`: the rule's identity across reloads and its
    /// statistics key.
    pub path: String,
    /// `None` when `unlimited`.
    pub limit: Option<Limit>,
    pub name: String,
    pub replaces: Vec<String>,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
}

#[derive(Debug)]
struct Wildcard {
    /// `key_prefix*`, the child's map key.
    key: String,
    parts: Vec<String>,
}

#[derive(Debug, Default)]
struct Node {
    children: HashMap<String, Node>,
    wildcards: Vec<Wildcard>,
    rule: Option<Arc<Rule>>,
    value_to_metric: bool,
    share_threshold: bool,
    /// `key_pattern*` when `share_threshold` is set.
    wildcard_pattern: String,
}

/// Where a forward-auth descriptor entry's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthSource {
    Literal(String),
    ClientAddress,
    Method,
    Path,
    Header(HeaderName),
}

/// How `/forward-auth/<domain>` turns an HTTP request into descriptors.
#[derive(Debug)]
pub struct ForwardAuth {
    pub descriptors: Vec<Vec<(String, AuthSource)>>,
    pub trusted: TrustedProxies,
    pub deny_status: StatusCode,
}

/// One domain's tree.
#[derive(Debug, Default)]
pub struct Domain {
    root: Node,
    pub forward_auth: Option<ForwardAuth>,
}

/// Every domain, compiled.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Domain>,
}

/// A file that could not be used: which one and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file, self.message)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// The domain's tree, if configured.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Whether no domain is configured.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Every rule with a limit, each once.
    pub fn rules(&self) -> Vec<Arc<Rule>> {
        fn walk(node: &Node, out: &mut Vec<Arc<Rule>>) {
            if let Some(r) = &node.rule {
                out.push(r.clone());
            }
            for child in node.children.values() {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        for d in self.domains.values() {
            walk(&d.root, &mut out);
        }
        out
    }

    /// Loads every file under `dir` (recursively, in name order; dot
    /// files skipped when `ignore_dotfiles`). A missing directory is an
    /// empty configuration.
    pub fn load_dir(
        dir: &Path,
        ignore_dotfiles: bool,
        merge_domains: bool,
    ) -> Result<Config, ConfigError> {
        let mut files = Vec::new();
        collect(dir, ignore_dotfiles, &mut files).map_err(|e| ConfigError {
            file: dir.display().to_string(),
            message: format!("cannot read the directory: {e}"),
        })?;
        files.sort();
        let mut loaded = Vec::with_capacity(files.len());
        for path in &files {
            let name = path.strip_prefix(dir).unwrap_or(path).display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                file: name.clone(),
                message: format!("cannot read the file: {e}"),
            })?;
            loaded.push((name, text));
        }
        Config::from_files(&loaded, merge_domains)
    }

    /// Compiles `(name, YAML text)` files.
    pub fn from_files(
        files: &[(String, String)],
        merge_domains: bool,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (name, text) in files {
            let err = |message: String| ConfigError {
                file: name.clone(),
                message,
            };
            let root: FileRoot = serde_yaml_ng::from_str(text)
                .map_err(|e| err(format!("error loading config file: {e}")))?;
            if root.domain.is_empty() {
                return Err(err("config file cannot have empty domain".into()));
            }
            let forward_auth = root
                .forward_auth
                .map(forward_auth)
                .transpose()
                .map_err(err)?;
            let domain = match config.domains.get_mut(&root.domain) {
                Some(d) if merge_domains => d,
                Some(_) => {
                    return Err(err(format!(
                        "duplicate domain '{}' in config file",
                        root.domain
                    )));
                }
                None => config.domains.entry(root.domain.clone()).or_default(),
            };
            if forward_auth.is_some() {
                if domain.forward_auth.is_some() {
                    return Err(err(format!(
                        "forward_auth of domain '{}' given twice",
                        root.domain
                    )));
                }
                domain.forward_auth = forward_auth;
            }
            load_level(
                &mut domain.root,
                &format!("{}.", root.domain),
                &root.descriptors,
            )
            .map_err(err)?;
        }
        Ok(config)
    }
}

fn collect(dir: &Path, ignore_dotfiles: bool, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if ignore_dotfiles && name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Follows symlinks: runtime directories are often symlink farms.
        let meta = std::fs::metadata(&path)?;
        if meta.is_dir() {
            collect(&path, ignore_dotfiles, out)?;
        } else if meta.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

fn load_level(node: &mut Node, parent: &str, descriptors: &[FileDescriptor]) -> Result<(), String> {
    for d in descriptors {
        if d.key.is_empty() {
            return Err("descriptor has empty key".into());
        }
        let final_key = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let path = format!("{parent}{final_key}");
        if node.children.contains_key(&final_key) {
            return Err(format!("duplicate descriptor composite key '{path}'"));
        }
        if d.quota_mode {
            return Err(format!(
                "{path}: quota_mode is not supported by ratecell-server"
            ));
        }
        let rule = d
            .rate_limit
            .as_ref()
            .map(|r| rule(&path, r, d))
            .transpose()
            .map_err(|e| format!("{path}: {e}"))?;
        let wildcard = final_key.contains('*');
        if d.share_threshold && !wildcard {
            return Err(format!(
                "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
            ));
        }
        if wildcard {
            node.wildcards.push(Wildcard {
                key: final_key.clone(),
                parts: final_key.split('*').map(str::to_owned).collect(),
            });
        }
        let mut child = Node {
            rule: rule.map(Arc::new),
            value_to_metric: d.value_to_metric,
            share_threshold: d.share_threshold,
            wildcard_pattern: if d.share_threshold {
                final_key.clone()
            } else {
                String::new()
            },
            ..Node::default()
        };
        load_level(&mut child, &format!("{path}."), &d.descriptors)?;
        node.children.insert(final_key, child);
    }
    Ok(())
}

/// The seconds of one of envoyproxy/ratelimit's units.
pub fn unit_seconds(unit: Unit) -> Option<u64> {
    Some(match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3600,
        Unit::Day => 86_400,
        Unit::Week => 7 * 86_400,
        Unit::Month => 30 * 86_400,
        Unit::Year => 365 * 86_400,
        Unit::Unknown => return None,
    })
}

/// The limit of `requests_per_unit` per `unit`, as envoyproxy/ratelimit
/// counts it: a fixed window.
pub fn unit_limit(requests_per_unit: u32, unit: Unit) -> Option<Limit> {
    let period_ns = unit_seconds(unit)? * 1_000_000_000;
    Some(Limit {
        config: (requests_per_unit > 0).then(|| {
            LimitConfig::new(
                Algorithm::FixedWindow,
                u64::from(requests_per_unit),
                period_ns,
            )
        }),
        requests_per_unit,
        unit,
        period_ns,
    })
}

fn rule(path: &str, r: &FileRateLimit, d: &FileDescriptor) -> Result<Rule, String> {
    for rep in &r.replaces {
        if rep.name.is_empty() {
            return Err("should not have an empty replaces entry".into());
        }
        if rep.name == r.name {
            return Err("replaces should not contain name of same descriptor".into());
        }
    }
    let limit = if r.unlimited {
        if r.unit.is_some() || r.period.is_some() {
            return Err("should not specify rate limit unit when unlimited".into());
        }
        None
    } else {
        Some(limit(r)?)
    };
    Ok(Rule {
        path: path.to_owned(),
        limit,
        name: r.name.clone(),
        replaces: r.replaces.iter().map(|x| x.name.clone()).collect(),
        shadow_mode: d.shadow_mode,
        detailed_metric: d.detailed_metric,
    })
}

fn limit(r: &FileRateLimit) -> Result<Limit, String> {
    let requests = r.requests_per_unit.unwrap_or(0);
    let requests_per_unit = u32::try_from(requests)
        .map_err(|_| format!("requests_per_unit {requests} is more than 4294967295"))?;
    let (period_ns, unit) = match (&r.unit, &r.period) {
        (Some(_), Some(_)) => return Err("give unit or period, not both".into()),
        (None, None) => return Err("invalid rate limit unit ''".into()),
        (Some(u), None) => {
            let unit = Unit::from_str_name(&u.to_ascii_uppercase())
                .filter(|u| *u != Unit::Unknown)
                .ok_or_else(|| format!("invalid rate limit unit '{u}'"))?;
            (
                unit_seconds(unit).expect("a known unit") * 1_000_000_000,
                unit,
            )
        }
        (None, Some(p)) => {
            let ns = parse_duration(p).map_err(|e| format!("period: {e}"))?;
            let unit = [
                Unit::Second,
                Unit::Minute,
                Unit::Hour,
                Unit::Day,
                Unit::Week,
                Unit::Month,
                Unit::Year,
            ]
            .into_iter()
            .find(|u| unit_seconds(*u).map(|s| s * 1_000_000_000) == Some(ns))
            .unwrap_or(Unit::Unknown);
            (ns, unit)
        }
    };
    let algorithm = match &r.algorithm {
        None => Algorithm::FixedWindow,
        Some(a) => Algorithm::from_name(a).ok_or_else(|| {
            format!(
                "algorithm '{a}' is not one of gcra, leaky_bucket, token_bucket, fixed_window, sliding_window, bucketed_window, sliding_log"
            )
        })?,
    };
    if r.burst.is_some() && !algorithm.has_burst() {
        return Err(format!("burst is not a parameter of {}", algorithm.name()));
    }
    if r.sub_windows.is_some() && algorithm != Algorithm::BucketedWindow {
        return Err(format!(
            "sub_windows is not a parameter of {}",
            algorithm.name()
        ));
    }
    let config = if requests == 0 {
        None
    } else {
        let mut c = LimitConfig::new(algorithm, requests, period_ns);
        if let Some(b) = r.burst {
            c = c.burst(b);
        }
        if let Some(n) = r.sub_windows {
            c = c.sub_windows(n);
        }
        // The library checks every field; its message names the field.
        ratecell::Limiter::builder()
            .limit(c)
            .build()
            .map_err(|e| e.to_string())?;
        Some(c)
    };
    Ok(Limit {
        config,
        requests_per_unit,
        unit,
        period_ns,
    })
}

fn forward_auth(f: FileForwardAuth) -> Result<ForwardAuth, String> {
    if f.descriptors.is_empty() {
        return Err("forward_auth.descriptors: give at least one descriptor".into());
    }
    let mut descriptors = Vec::with_capacity(f.descriptors.len());
    for (i, d) in f.descriptors.into_iter().enumerate() {
        if d.is_empty() {
            return Err(format!(
                "forward_auth.descriptors[{i}]: give at least one entry"
            ));
        }
        let mut entries = Vec::with_capacity(d.len());
        for e in d {
            let source = match (e.value, e.from.as_deref()) {
                (Some(v), None) => AuthSource::Literal(v),
                (None, Some("client_address")) => AuthSource::ClientAddress,
                (None, Some("method")) => AuthSource::Method,
                (None, Some("path")) => AuthSource::Path,
                (None, Some(h)) if h.starts_with("header:") => {
                    let name = &h["header:".len()..];
                    AuthSource::Header(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                        format!("forward_auth.descriptors[{i}]: {name:?} is not a header name")
                    })?)
                }
                (None, Some(other)) => {
                    return Err(format!(
                        "forward_auth.descriptors[{i}]: from {other:?} is not client_address, method, path or header:<name>"
                    ));
                }
                _ => {
                    return Err(format!(
                        "forward_auth.descriptors[{i}]: entry {:?} needs exactly one of value and from",
                        e.key
                    ));
                }
            };
            entries.push((e.key, source));
        }
        descriptors.push(entries);
    }
    let trusted = if f.trusted_proxies.is_empty() {
        TrustedProxies::None
    } else {
        TrustedProxies::Cidrs(
            f.trusted_proxies
                .iter()
                .map(|c| {
                    c.parse::<Cidr>()
                        .map_err(|e| format!("forward_auth.trusted_proxies: {e}"))
                })
                .collect::<Result<_, _>>()?,
        )
    };
    let deny_status = match f.deny_status {
        None => StatusCode::TOO_MANY_REQUESTS,
        Some(s) => StatusCode::from_u16(s)
            .ok()
            .filter(|c| c.is_client_error() || c.is_server_error())
            .ok_or_else(|| format!("forward_auth.deny_status: {s} is not a 4xx or 5xx status"))?,
    };
    Ok(ForwardAuth {
        descriptors,
        trusted,
        deny_status,
    })
}

#[cfg(test)]
mod tests;
