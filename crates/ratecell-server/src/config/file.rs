//! One configuration file as written: envoyproxy/ratelimit's YAML schema,
//! key for key, plus ratecell's extensions (`algorithm`, `period`,
//! `burst`, `sub_windows`, `forward_auth`). Unknown keys are refused, as
//! the incumbent refuses them, so a typo is an error and not a silently
//! missing limit.

use serde::Deserialize;

/// A file: one domain and its descriptors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRoot {
    #[serde(default)]
    pub domain: String,
    #[serde(default)]
    pub descriptors: Vec<FileDescriptor>,
    /// How `/forward-auth/<domain>` builds descriptors from HTTP requests.
    #[serde(default)]
    pub forward_auth: Option<FileForwardAuth>,
}

/// A descriptor level: a key, optionally a value (exact or with `*`), an
/// optional limit and nested levels.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDescriptor {
    #[serde(default)]
    pub key: String,
    #[serde(default, deserialize_with = "scalar_string")]
    pub value: String,
    #[serde(default)]
    pub rate_limit: Option<FileRateLimit>,
    #[serde(default)]
    pub descriptors: Vec<FileDescriptor>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub quota_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
    #[serde(default)]
    pub value_to_metric: bool,
    #[serde(default)]
    pub share_threshold: bool,
    /// Accepted and ignored (envoyproxy/ratelimit returns it as dynamic
    /// metadata when RESPONSE_DYNAMIC_METADATA is set).
    #[serde(default, rename = "metadata")]
    pub _metadata: Option<serde::de::IgnoredAny>,
}

/// A limit.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRateLimit {
    #[serde(default)]
    pub requests_per_unit: Option<u64>,
    #[serde(default)]
    pub unit: Option<String>,
    #[serde(default)]
    pub unlimited: bool,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub replaces: Vec<FileReplaces>,
    /// ratecell: one of the seven algorithms (`fixed_window` by default,
    /// the incumbent's).
    #[serde(default)]
    pub algorithm: Option<String>,
    /// ratecell: the period in SPEC §2's grammar (`10s`, `1500ms`), in
    /// place of `unit`.
    #[serde(default)]
    pub period: Option<String>,
    /// ratecell: the burst of GCRA, the leaky and the token bucket.
    #[serde(default)]
    pub burst: Option<u64>,
    /// ratecell: the bucketed window's sub-windows.
    #[serde(default)]
    pub sub_windows: Option<u32>,
}

/// A `replaces` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileReplaces {
    #[serde(default)]
    pub name: String,
}

/// The forward-auth endpoint's descriptors and client-address rules.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileForwardAuth {
    /// Each descriptor is a list of entries.
    pub descriptors: Vec<Vec<FileAuthEntry>>,
    /// Proxies whose `X-Forwarded-For` is believed (CIDRs).
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// The status of a denial (429; nginx's `auth_request` needs 401 or
    /// 403, which `error_page` maps back to 429).
    #[serde(default)]
    pub deny_status: Option<u16>,
}

/// One entry of a forward-auth descriptor: a literal value, or where the
/// value comes from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAuthEntry {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    /// `client_address`, `method`, `path` or `header:<name>`.
    #[serde(default)]
    pub from: Option<String>,
}

/// A value YAML may read as a number or a boolean (`value: 200`) is a
/// string here, as Go's YAML decoder makes it for a string field.
fn scalar_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde_yaml_ng::Value;
    match Value::deserialize(d)? {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(serde::de::Error::custom("value must be a string")),
    }
}
