//! The `/json` endpoint's bodies: `RateLimitRequest` and
//! `RateLimitResponse` in protobuf's JSON mapping, as envoyproxy/ratelimit
//! reads and writes them (lowerCamelCase names, the original snake_case
//! names also read; enums by name; 64-bit integers as strings or numbers;
//! `Duration` as `"1.500s"`; zero values left out).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, rate_limit::Unit};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt64Value};
use serde_json::{Map, Value, json};

fn field<'v>(obj: &'v Map<String, Value>, camel: &str, snake: &str) -> Option<&'v Value> {
    obj.get(camel)
        .or_else(|| obj.get(snake))
        .filter(|v| !v.is_null())
}

fn unsigned(v: &Value, what: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{what}: {n} is not an unsigned integer")),
        Value::String(s) => s
            .parse()
            .map_err(|_| format!("{what}: {s:?} is not an unsigned integer")),
        other => Err(format!("{what}: {other} is not an unsigned integer")),
    }
}

fn u32_of(v: &Value, what: &str) -> Result<u32, String> {
    let n = unsigned(v, what)?;
    u32::try_from(n).map_err(|_| format!("{what}: {n} is more than 4294967295"))
}

fn string(v: &Value, what: &str) -> Result<String, String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{what}: {v} is not a string"))
}

fn object<'v>(v: &'v Value, what: &str) -> Result<&'v Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what}: {v} is not an object"))
}

fn known(obj: &Map<String, Value>, what: &str, names: &[&str]) -> Result<(), String> {
    match obj.keys().find(|k| !names.contains(&k.as_str())) {
        Some(k) => Err(format!("{what}: unknown field {k:?}")),
        None => Ok(()),
    }
}

/// Reads a request body; the error names the field at fault.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let obj = object(&v, "request")?;
    known(
        obj,
        "request",
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
    )?;
    let mut req = RateLimitRequest::default();
    if let Some(d) = field(obj, "domain", "domain") {
        req.domain = string(d, "domain")?;
    }
    if let Some(h) = field(obj, "hitsAddend", "hits_addend") {
        req.hits_addend = u32_of(h, "hitsAddend")?;
    }
    if let Some(list) = field(obj, "descriptors", "descriptors") {
        let list = list.as_array().ok_or("descriptors: not a list")?;
        for (i, d) in list.iter().enumerate() {
            req.descriptors
                .push(descriptor(d, &format!("descriptors[{i}]"))?);
        }
    }
    Ok(req)
}

fn descriptor(v: &Value, what: &str) -> Result<RateLimitDescriptor, String> {
    let obj = object(v, what)?;
    known(
        obj,
        what,
        &[
            "entries",
            "limit",
            "hitsAddend",
            "hits_addend",
            "isNegativeHits",
            "is_negative_hits",
        ],
    )?;
    let mut d = RateLimitDescriptor::default();
    if let Some(list) = field(obj, "entries", "entries") {
        let list = list
            .as_array()
            .ok_or_else(|| format!("{what}.entries: not a list"))?;
        for (j, e) in list.iter().enumerate() {
            let w = format!("{what}.entries[{j}]");
            let e = object(e, &w)?;
            known(e, &w, &["key", "value"])?;
            d.entries.push(Entry {
                key: field(e, "key", "key")
                    .map(|k| string(k, &w))
                    .transpose()?
                    .unwrap_or_default(),
                value: field(e, "value", "value")
                    .map(|k| string(k, &w))
                    .transpose()?
                    .unwrap_or_default(),
            });
        }
    }
    if let Some(l) = field(obj, "limit", "limit") {
        let w = format!("{what}.limit");
        let l = object(l, &w)?;
        known(l, &w, &["requestsPerUnit", "requests_per_unit", "unit"])?;
        let unit = match field(l, "unit", "unit") {
            None => Unit::Unknown,
            Some(Value::String(s)) => {
                Unit::from_str_name(s).ok_or_else(|| format!("{w}.unit: {s:?} is not a unit"))?
            }
            Some(n) => Unit::try_from(u32_of(n, &w)? as i32)
                .map_err(|_| format!("{w}.unit: {n} is not a unit"))?,
        };
        d.limit = Some(RateLimitOverride {
            requests_per_unit: field(l, "requestsPerUnit", "requests_per_unit")
                .map(|n| u32_of(n, &w))
                .transpose()?
                .unwrap_or(0),
            unit: unit as i32,
        });
    }
    if let Some(h) = field(obj, "hitsAddend", "hits_addend") {
        d.hits_addend = Some(UInt64Value {
            value: unsigned(h, &format!("{what}.hitsAddend"))?,
        });
    }
    if field(obj, "isNegativeHits", "is_negative_hits").and_then(Value::as_bool) == Some(true) {
        return Err(format!("{what}.isNegativeHits: not supported"));
    }
    Ok(d)
}

/// `"1.500s"`: seconds with 0, 3, 6 or 9 fractional digits.
fn duration(d: &PbDuration) -> String {
    let nanos = d.nanos.unsigned_abs();
    if nanos == 0 {
        format!("{}s", d.seconds)
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}.{:03}s", d.seconds, nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{}.{:06}s", d.seconds, nanos / 1_000)
    } else {
        format!("{}.{:09}s", d.seconds, nanos)
    }
}

fn code(c: i32) -> Option<&'static str> {
    match Code::try_from(c).ok()? {
        Code::Unknown => None,
        other => Some(other.as_str_name()),
    }
}

/// Writes a response body.
pub fn response(r: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if let Some(c) = code(r.overall_code) {
        out.insert("overallCode".into(), json!(c));
    }
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut o = Map::new();
            if let Some(c) = code(s.code) {
                o.insert("code".into(), json!(c));
            }
            if let Some(l) = &s.current_limit {
                let mut lo = Map::new();
                if !l.name.is_empty() {
                    lo.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lo.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                if let Ok(u) = Unit::try_from(l.unit)
                    && u != Unit::Unknown
                {
                    lo.insert("unit".into(), json!(u.as_str_name()));
                }
                o.insert("currentLimit".into(), Value::Object(lo));
            }
            if s.limit_remaining != 0 {
                o.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                o.insert("durationUntilReset".into(), json!(duration(d)));
            }
            Value::Object(o)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let h: Vec<Value> = r
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(h));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_both_spellings_and_name_bad_fields() {
        let r = parse_request(
            br#"{"domain":"d","hits_addend":2,"descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"5"}]}"#,
        )
        .unwrap();
        assert_eq!(r.domain, "d");
        assert_eq!(r.hits_addend, 2);
        assert_eq!(r.descriptors[0].entries[0].value, "v");
        assert_eq!(r.descriptors[0].hits_addend.as_ref().unwrap().value, 5);
        for (body, names) in [
            (&br#"{"domian":"d"}"#[..], "domian"),
            (
                br#"{"descriptors":[{"entries":[{"key":1}]}]}"#,
                "descriptors[0].entries[0]",
            ),
            (br#"{"hitsAddend":-1}"#, "hitsAddend"),
            (
                br#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
                "descriptors[0].limit.unit",
            ),
        ] {
            let e = parse_request(body).unwrap_err();
            assert!(e.contains(names), "{e}");
        }
    }

    #[test]
    fn durations_print_as_protojson_does() {
        assert_eq!(
            duration(&PbDuration {
                seconds: 5,
                nanos: 0
            }),
            "5s"
        );
        assert_eq!(
            duration(&PbDuration {
                seconds: 1,
                nanos: 500_000_000
            }),
            "1.500s"
        );
        assert_eq!(
            duration(&PbDuration {
                seconds: 0,
                nanos: 1_500
            }),
            "0.000001500s"
        );
    }
}
