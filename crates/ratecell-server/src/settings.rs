//! The server's settings: envoyproxy/ratelimit's environment variables,
//! under their names and defaults, so a deployment that swaps the image
//! keeps its environment; ratecell's own settings are `RATECELL_*`.
//! Every value is checked here, once: a bad one is an error naming the
//! variable, before anything listens.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ratecell::parse_duration;
use ratecell_redis_client::FailurePolicy;

/// Where limits are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// In this process: one keyed table per rule.
    Memory,
    /// In Redis, through ratecell's module.
    Redis(RedisSettings),
}

/// How the Redis backend uses Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisMode {
    /// One `RATECELL.CHECKALL` per request: exact, all-or-nothing.
    Strict,
    /// Units granted in batches (`RATECELL.LEASE`), spent locally.
    Leased,
}

/// What a strict request does when Redis does not answer in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrictFailure {
    /// Answer the gRPC call with `UNAVAILABLE`, as envoyproxy/ratelimit
    /// does; Envoy's `failure_mode_deny` then decides.
    Error,
    /// Admit the request.
    Allow,
    /// Deny the request.
    Deny,
}

/// The Redis backend's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://…` URL built from `REDIS_SOCKET_TYPE`, `REDIS_URL`,
    /// `REDIS_AUTH` and `REDIS_TLS` (a cluster's first node).
    pub url: String,
    /// `REDIS_TYPE=CLUSTER`: every node of `REDIS_URL` (`host:port`,
    /// comma-separated) as such a URL, `url` first.
    pub cluster: Option<Vec<String>>,
    pub mode: RedisMode,
    pub timeout: Duration,
    pub strict_failure: StrictFailure,
    /// The leased mode's failure policy (`deny` or `local:<nodes>`).
    pub lease_failure: FailurePolicy,
    /// The leased mode's grant sizing, in percent of each limit and of its
    /// period (`RATECELL_LEASE_SHARE`): a replica asks for at most this
    /// share of the limit at once, to cover its checks of this share of
    /// the period. `None`: SPEC §8's defaults (10 %).
    pub lease_share: Option<u64>,
}

/// Which rate-limit headers a response carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResponseHeaders {
    None,
    /// envoyproxy/ratelimit's three headers (`LIMIT_RESPONSE_HEADERS_ENABLED`).
    Legacy {
        limit: String,
        remaining: String,
        reset: String,
    },
    /// draft-ietf-httpapi-ratelimit-headers' `RateLimit` and
    /// `RateLimit-Policy` (`RATECELL_RESPONSE_HEADERS=draft`).
    Draft,
}

/// The gRPC port's TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// Everything the server reads from its environment.
#[derive(Clone, Debug)]
pub struct Settings {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub debug_addr: SocketAddr,
    /// `/metrics` on its own address too (`USE_PROMETHEUS`).
    pub prometheus: Option<(SocketAddr, String)>,
    /// The directory of configuration files.
    pub config_dir: PathBuf,
    /// The directory watched for changes (the runtime root, whose
    /// symlink swaps envoyproxy/ratelimit's deployments use).
    pub watch_dir: PathBuf,
    pub ignore_dotfiles: bool,
    pub log_level: String,
    pub log_json: bool,
    pub backend: BackendKind,
    pub near_limit_ratio: f64,
    pub shadow_mode: bool,
    pub headers: ResponseHeaders,
    pub tls: Option<TlsSettings>,
    pub cache_key_prefix: String,
    pub merge_domains: bool,
    pub healthy_with_config: bool,
    /// Keys each rule's in-memory table holds before evicting.
    pub memory_keys: u64,
    /// The memory backend saves its tables here on shutdown and restores
    /// them on start.
    pub snapshot_dir: Option<PathBuf>,
}

/// A setting that cannot be used: the variable and why.
#[derive(Debug, PartialEq, Eq)]
pub struct SettingError {
    pub variable: String,
    pub message: String,
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.variable, self.message)
    }
}

impl std::error::Error for SettingError {}

/// Reads variables; a map in tests, the environment in the binary.
pub trait Env {
    fn get(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl<const N: usize> Env for [(&str, &str); N] {
    fn get(&self, name: &str) -> Option<String> {
        self.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

fn error(variable: &str, message: impl Into<String>) -> SettingError {
    SettingError {
        variable: variable.to_owned(),
        message: message.into(),
    }
}

fn string(env: &dyn Env, name: &str, default: &str) -> String {
    env.get(name).unwrap_or_else(|| default.to_owned())
}

/// Go's `strconv.ParseBool`, which envoyproxy/ratelimit's settings use.
fn boolean(env: &dyn Env, name: &str, default: bool) -> Result<bool, SettingError> {
    match env.get(name).as_deref() {
        None => Ok(default),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(other) => Err(error(
            name,
            format!("{other:?} is not a boolean (true or false)"),
        )),
    }
}

fn number<T: std::str::FromStr>(env: &dyn Env, name: &str, default: T) -> Result<T, SettingError> {
    match env.get(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| error(name, format!("{v:?} is not a valid number"))),
    }
}

/// A duration as Go writes them (`10s`, `500ms`, `1m`), through ratecell's
/// one duration grammar (SPEC §2).
fn duration(env: &dyn Env, name: &str, default: Duration) -> Result<Duration, SettingError> {
    match env.get(name) {
        None => Ok(default),
        Some(v) => parse_duration(&v)
            .map(Duration::from_nanos)
            .map_err(|e| error(name, e.to_string())),
    }
}

fn addr(
    env: &dyn Env,
    host: &str,
    port: &str,
    default_port: u16,
) -> Result<SocketAddr, SettingError> {
    let h = string(env, host, "0.0.0.0");
    let p: u16 = number(env, port, default_port)?;
    let ip = h
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| error(host, format!("{h:?} is not an IP address")))?;
    Ok(SocketAddr::new(ip, p))
}

impl Settings {
    /// The settings `env` gives; `config_dir` (the `--config-dir` flag)
    /// overrides the runtime variables.
    pub fn from_env(env: &dyn Env, config_dir: Option<PathBuf>) -> Result<Settings, SettingError> {
        let runtime_root = PathBuf::from(string(env, "RUNTIME_ROOT", "/srv/runtime_data/current"));
        let sub = string(env, "RUNTIME_SUBDIRECTORY", "");
        let app = string(env, "RUNTIME_APPDIRECTORY", "config");
        let (config_dir, watch_dir) = match config_dir {
            Some(dir) => (dir.clone(), dir),
            None => {
                let dir = runtime_root.join(&sub).join(&app);
                let watch = if boolean(env, "RUNTIME_WATCH_ROOT", true)? {
                    runtime_root.clone()
                } else {
                    dir.clone()
                };
                (dir, watch)
            }
        };

        let prometheus = if boolean(env, "USE_PROMETHEUS", false)? {
            let a = string(env, "PROMETHEUS_ADDR", ":9090");
            let a = if a.starts_with(':') {
                format!("0.0.0.0{a}")
            } else {
                a
            };
            let sock = a
                .parse()
                .map_err(|_| error("PROMETHEUS_ADDR", format!("{a:?} is not host:port")))?;
            let path = string(env, "PROMETHEUS_PATH", "/metrics");
            if !path.starts_with('/') {
                return Err(error(
                    "PROMETHEUS_PATH",
                    format!("{path:?} must start with /"),
                ));
            }
            Some((sock, path))
        } else {
            None
        };

        let near_limit_ratio: f64 = number(env, "NEAR_LIMIT_RATIO", 0.8)?;
        if !(0.0..=1.0).contains(&near_limit_ratio) {
            return Err(error(
                "NEAR_LIMIT_RATIO",
                format!("{near_limit_ratio} is outside 0..=1"),
            ));
        }

        let headers = match env.get("RATECELL_RESPONSE_HEADERS").as_deref() {
            Some("draft") => ResponseHeaders::Draft,
            Some("legacy") | None if boolean(env, "LIMIT_RESPONSE_HEADERS_ENABLED", false)? => {
                ResponseHeaders::Legacy {
                    limit: string(env, "LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
                    remaining: string(env, "LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                    reset: string(env, "LIMIT_RESET_HEADER", "RateLimit-Reset"),
                }
            }
            Some("none") | None => ResponseHeaders::None,
            Some("legacy") => {
                return Err(error(
                    "RATECELL_RESPONSE_HEADERS",
                    "legacy needs LIMIT_RESPONSE_HEADERS_ENABLED=true",
                ));
            }
            Some(other) => {
                return Err(error(
                    "RATECELL_RESPONSE_HEADERS",
                    format!("{other:?} is not draft, legacy or none"),
                ));
            }
        };

        let tls = if boolean(env, "GRPC_SERVER_USE_TLS", false)? {
            let cert = env.get("GRPC_SERVER_TLS_CERT").ok_or_else(|| {
                error(
                    "GRPC_SERVER_TLS_CERT",
                    "required when GRPC_SERVER_USE_TLS is true",
                )
            })?;
            let key = env.get("GRPC_SERVER_TLS_KEY").ok_or_else(|| {
                error(
                    "GRPC_SERVER_TLS_KEY",
                    "required when GRPC_SERVER_USE_TLS is true",
                )
            })?;
            Some(TlsSettings {
                cert: cert.into(),
                key: key.into(),
                client_ca: env.get("GRPC_CLIENT_TLS_CACERT").map(PathBuf::from),
            })
        } else {
            None
        };

        let backend = backend(env)?;
        let log_format = string(env, "LOG_FORMAT", "text");
        let log_json = match log_format.as_str() {
            "json" => true,
            "text" => false,
            other => {
                return Err(error(
                    "LOG_FORMAT",
                    format!("{other:?} is not text or json"),
                ));
            }
        };
        let memory_keys: u64 = number(env, "RATECELL_MEMORY_KEYS", 65_536)?;
        if memory_keys == 0 {
            return Err(error("RATECELL_MEMORY_KEYS", "must be at least 1"));
        }

        Ok(Settings {
            http_addr: addr(env, "HOST", "PORT", 8080)?,
            grpc_addr: addr(env, "GRPC_HOST", "GRPC_PORT", 8081)?,
            debug_addr: addr(env, "DEBUG_HOST", "DEBUG_PORT", 6070)?,
            prometheus,
            config_dir,
            watch_dir,
            ignore_dotfiles: boolean(env, "RUNTIME_IGNOREDOTFILES", false)?,
            log_level: string(env, "LOG_LEVEL", "warn").to_ascii_lowercase(),
            log_json,
            backend,
            near_limit_ratio,
            shadow_mode: boolean(env, "SHADOW_MODE", false)?,
            headers,
            tls,
            cache_key_prefix: string(env, "CACHE_KEY_PREFIX", ""),
            merge_domains: boolean(env, "MERGE_DOMAIN_CONFIG", false)?,
            healthy_with_config: boolean(env, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
            memory_keys,
            snapshot_dir: env.get("RATECELL_SNAPSHOT_DIR").map(PathBuf::from),
        })
    }
}

fn backend(env: &dyn Env) -> Result<BackendKind, SettingError> {
    let url = env.get("REDIS_URL");
    let kind = env
        .get("BACKEND_TYPE")
        .unwrap_or_else(|| if url.is_some() { "redis" } else { "memory" }.to_owned());
    match kind.as_str() {
        "memory" => return Ok(BackendKind::Memory),
        "redis" => {}
        "memcache" => {
            return Err(error(
                "BACKEND_TYPE",
                "memcache is not supported: use memory or redis (ratecell's module)",
            ));
        }
        other => {
            return Err(error(
                "BACKEND_TYPE",
                format!("{other:?} is not memory or redis"),
            ));
        }
    }
    let url = url.ok_or_else(|| error("REDIS_URL", "required when BACKEND_TYPE is redis"))?;
    let cluster = match string(env, "REDIS_TYPE", "SINGLE")
        .to_ascii_uppercase()
        .as_str()
    {
        "SINGLE" => false,
        "CLUSTER" => true,
        other => {
            return Err(error(
                "REDIS_TYPE",
                format!("{other:?} is not supported: SINGLE or CLUSTER (Sentinel is not yet)"),
            ));
        }
    };
    let (url, cluster) = if cluster {
        // envoyproxy/ratelimit's convention: `host:port` nodes separated by
        // commas, over TCP (a cluster names its nodes by address).
        if env.get("REDIS_SOCKET_TYPE").as_deref() == Some("unix") {
            return Err(error(
                "REDIS_SOCKET_TYPE",
                "unix: a cluster is reached over tcp",
            ));
        }
        let nodes = url
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| match n.starts_with("unix://") {
                true => Err(error(
                    "REDIS_URL",
                    format!("{n}: a cluster node is host:port"),
                )),
                false => redis_url(env, n, "tcp"),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let first = nodes
            .first()
            .cloned()
            .ok_or_else(|| error("REDIS_URL", "no node in the list"))?;
        (first, Some(nodes))
    } else {
        let socket = string(env, "REDIS_SOCKET_TYPE", "unix");
        (redis_url(env, &url, &socket)?, None)
    };
    let mode = match string(env, "RATECELL_REDIS_MODE", "strict").as_str() {
        "strict" => RedisMode::Strict,
        "leased" => RedisMode::Leased,
        other => {
            return Err(error(
                "RATECELL_REDIS_MODE",
                format!("{other:?} is not strict or leased"),
            ));
        }
    };
    let timeout = duration(env, "REDIS_TIMEOUT", Duration::from_secs(10))?;
    if timeout.is_zero() {
        return Err(error("REDIS_TIMEOUT", "must be more than 0"));
    }
    let lease_share = match env.get("RATECELL_LEASE_SHARE") {
        None => None,
        Some(_) if mode == RedisMode::Strict => {
            return Err(error(
                "RATECELL_LEASE_SHARE",
                "only the leased mode takes grants",
            ));
        }
        Some(_) => Some(number::<u64>(env, "RATECELL_LEASE_SHARE", 10)?)
            .filter(|p| (1..=100).contains(p))
            .map(Some)
            .ok_or_else(|| error("RATECELL_LEASE_SHARE", "a percentage from 1 to 100"))?,
    };
    // Each mode's own policies: the strict mode answers for a request it
    // could not ask about; the leased mode decides keys without units.
    let policy = env.get("RATECELL_FAILURE_POLICY");
    let bad = |p: &str, allowed: &str| {
        error(
            "RATECELL_FAILURE_POLICY",
            format!(
                "{p:?} is not a policy of the {} mode: {allowed}",
                if mode == RedisMode::Strict {
                    "strict"
                } else {
                    "leased"
                }
            ),
        )
    };
    let (strict_failure, lease_failure) = match (mode, policy.as_deref()) {
        (RedisMode::Strict, None | Some("error")) => (StrictFailure::Error, FailurePolicy::Deny),
        (RedisMode::Strict, Some("allow")) => (StrictFailure::Allow, FailurePolicy::Deny),
        (RedisMode::Strict, Some("deny")) => (StrictFailure::Deny, FailurePolicy::Deny),
        (RedisMode::Strict, Some(p)) => return Err(bad(p, "error, allow or deny")),
        (RedisMode::Leased, None | Some("deny")) => (StrictFailure::Error, FailurePolicy::Deny),
        (RedisMode::Leased, Some(p)) => {
            let nodes = p
                .strip_prefix("local:")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| bad(p, "deny or local:<replicas> (replicas ≥ 1)"))?;
            (
                StrictFailure::Error,
                FailurePolicy::Local {
                    expected_nodes: nodes,
                },
            )
        }
    };
    Ok(BackendKind::Redis(RedisSettings {
        url,
        cluster,
        mode,
        timeout,
        strict_failure,
        lease_failure,
        lease_share,
    }))
}

/// `url` as a `redis://` URL: as it is when it is one, else a node's
/// address over `socket` with `REDIS_AUTH` and `REDIS_TLS`.
fn redis_url(env: &dyn Env, url: &str, socket: &str) -> Result<String, SettingError> {
    if url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://") {
        return Ok(url.to_owned());
    }
    let tls = boolean(env, "REDIS_TLS", false)?;
    let auth = env.get("REDIS_AUTH").map(|a| match a.split_once(':') {
        Some((user, pass)) => format!("{user}:{pass}@"),
        None => format!(":{a}@"),
    });
    match socket {
        "tcp" => Ok(format!(
            "{}://{}{url}",
            if tls { "rediss" } else { "redis" },
            auth.unwrap_or_default()
        )),
        "unix" => Ok(format!("unix://{url}")),
        other => Err(error(
            "REDIS_SOCKET_TYPE",
            format!("{other:?} is not tcp or unix"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_envoyproxy_ratelimits() {
        let s = Settings::from_env(&[("RUNTIME_ROOT", "/r")], None).unwrap();
        assert_eq!(s.http_addr.port(), 8080);
        assert_eq!(s.grpc_addr.port(), 8081);
        assert_eq!(s.debug_addr.port(), 6070);
        assert_eq!(s.config_dir, PathBuf::from("/r/config"));
        assert_eq!(s.watch_dir, PathBuf::from("/r"));
        assert_eq!(s.backend, BackendKind::Memory);
        assert_eq!(s.near_limit_ratio, 0.8);
    }

    #[test]
    fn runtime_directories_compose_as_the_incumbents() {
        let env = [
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
        ];
        let s = Settings::from_env(&env, None).unwrap();
        assert_eq!(s.config_dir, PathBuf::from("/data/ratelimit/config"));
        assert_eq!(s.watch_dir, s.config_dir);
    }

    #[test]
    fn redis_url_selects_redis_with_tcp() {
        let env = [
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:6379"),
            ("REDIS_AUTH", "secret"),
            ("RATECELL_REDIS_MODE", "leased"),
            ("REDIS_TIMEOUT", "50ms"),
        ];
        let BackendKind::Redis(r) = Settings::from_env(&env, None).unwrap().backend else {
            panic!("redis expected")
        };
        assert_eq!(r.url, "redis://:secret@127.0.0.1:6379");
        assert_eq!(r.mode, RedisMode::Leased);
        assert_eq!(r.timeout, Duration::from_millis(50));
    }

    #[test]
    fn redis_type_cluster_takes_envoyproxy_ratelimits_list_of_nodes() {
        let env = [
            ("REDIS_TYPE", "cluster"),
            ("REDIS_URL", "10.0.0.1:7000, 10.0.0.2:7000,10.0.0.3:7000"),
            ("REDIS_AUTH", "secret"),
        ];
        let BackendKind::Redis(r) = Settings::from_env(&env, None).unwrap().backend else {
            panic!("redis expected")
        };
        // Over TCP whatever the socket type's default (unix).
        assert_eq!(r.url, "redis://:secret@10.0.0.1:7000");
        assert_eq!(
            r.cluster.unwrap(),
            [
                "redis://:secret@10.0.0.1:7000",
                "redis://:secret@10.0.0.2:7000",
                "redis://:secret@10.0.0.3:7000"
            ]
        );
        let single = [
            ("REDIS_URL", "127.0.0.1:6379"),
            ("REDIS_SOCKET_TYPE", "tcp"),
        ];
        let BackendKind::Redis(r) = Settings::from_env(&single, None).unwrap().backend else {
            panic!("redis expected")
        };
        assert_eq!(r.cluster, None);
        for (env, var) in [
            (
                [("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", "a:1")],
                "REDIS_TYPE",
            ),
            (
                [("REDIS_TYPE", "CLUSTER"), ("REDIS_SOCKET_TYPE", "unix")],
                "REDIS_SOCKET_TYPE",
            ),
            (
                [("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", " , ")],
                "REDIS_URL",
            ),
            (
                [("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", "unix:///r.sock")],
                "REDIS_URL",
            ),
        ] {
            let mut env = env.to_vec();
            if !env.iter().any(|(k, _)| *k == "REDIS_URL") {
                env.push(("REDIS_URL", "a:1,b:2"));
            }
            let e = Settings::from_env(&Vars(env), None).unwrap_err();
            assert_eq!(e.variable, var, "{e}");
        }
    }

    /// A list of variables of any length.
    struct Vars<'a>(Vec<(&'a str, &'a str)>);

    impl Env for Vars<'_> {
        fn get(&self, name: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn each_mode_takes_its_own_failure_policies() {
        let with = |mode: &str, policy: &str| {
            Settings::from_env(
                &[
                    ("REDIS_URL", "127.0.0.1:6379"),
                    ("REDIS_SOCKET_TYPE", "tcp"),
                    ("RATECELL_REDIS_MODE", mode),
                    ("RATECELL_FAILURE_POLICY", policy),
                ],
                None,
            )
        };
        let BackendKind::Redis(r) = with("leased", "local:4").unwrap().backend else {
            panic!("redis expected")
        };
        assert_eq!(r.lease_failure, FailurePolicy::Local { expected_nodes: 4 });
        let BackendKind::Redis(r) = with("strict", "allow").unwrap().backend else {
            panic!("redis expected")
        };
        assert_eq!(r.strict_failure, StrictFailure::Allow);
        for (mode, policy) in [
            ("leased", "allow"),
            ("leased", "local:0"),
            ("strict", "local:2"),
            ("strict", "open"),
        ] {
            let e = with(mode, policy).unwrap_err();
            assert_eq!(e.variable, "RATECELL_FAILURE_POLICY");
            assert!(e.message.contains(mode), "{e}");
        }
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (env, var) in [
            ([("PORT", "eighty")], "PORT"),
            ([("SHADOW_MODE", "maybe")], "SHADOW_MODE"),
            ([("NEAR_LIMIT_RATIO", "1.5")], "NEAR_LIMIT_RATIO"),
            ([("BACKEND_TYPE", "memcache")], "BACKEND_TYPE"),
            ([("BACKEND_TYPE", "redis")], "REDIS_URL"),
            ([("GRPC_SERVER_USE_TLS", "true")], "GRPC_SERVER_TLS_CERT"),
            ([("LOG_FORMAT", "xml")], "LOG_FORMAT"),
            ([("HOST", "localhost:1")], "HOST"),
        ] {
            let e = Settings::from_env(&env, None).unwrap_err();
            assert_eq!(e.variable, var, "{e}");
        }
        let e =
            Settings::from_env(&[("REDIS_URL", "x:1"), ("REDIS_TIMEOUT", "5")], None).unwrap_err();
        assert_eq!(e.variable, "REDIS_TIMEOUT");
    }
}
