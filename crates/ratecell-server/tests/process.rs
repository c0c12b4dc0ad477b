//! The `ratecell-server` binary as a process: settings and files refused
//! at start with the culprit named, counts saved on SIGTERM and restored
//! on start, live reload (a broken file keeps the running configuration),
//! TLS on the gRPC port. The proxies' view (Envoy's client, the
//! incumbent's differential, nginx, replicas) is in `interop/`, in Go.
//!
//! Every wait is a bounded number of polls of a condition the server
//! controls; no assertion is on elapsed time.

mod support;

use std::path::Path;
use std::process::Output;
use std::thread::sleep;

use support::{Dir, POLL, POLLS, Server, free_port, get};

const USER: &str = r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]}"#;

fn limit_file(per_hour: u32) -> String {
    format!(
        "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: {per_hour}}}\n"
    )
}

fn remaining(body: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["statuses"][0]["limitRemaining"].as_u64().unwrap_or(0)
}

fn run_to_exit(config: &Path, env: &[(&str, &str)]) -> Output {
    support::command(config, free_port(), free_port(), free_port())
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn a_bad_setting_stops_the_start_naming_the_variable() {
    let dir = Dir::new("settings");
    for (var, value) in [
        ("NEAR_LIMIT_RATIO", "2"),
        ("BACKEND_TYPE", "memcache"),
        ("RATECELL_REDIS_MODE", "eventual"),
    ] {
        let mut env = vec![(var, value)];
        if var == "RATECELL_REDIS_MODE" {
            env.push(("REDIS_URL", "127.0.0.1:1"));
        }
        let out = run_to_exit(&dir.config(), &env);
        assert_eq!(out.status.code(), Some(2), "{var}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(var), "{var}: {err}");
    }
}

#[test]
fn a_broken_file_at_start_is_refused_naming_it() {
    let dir = Dir::new("broken");
    dir.write("ok.yaml", &limit_file(5));
    dir.write("bad.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    let out = run_to_exit(&dir.config(), &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("fortnight"),
        "{err}"
    );
}

#[test]
fn sigterm_saves_the_counts_and_a_start_restores_them() {
    let dir = Dir::new("snapshot");
    dir.write("d.yaml", &limit_file(5));
    let snapshots = dir.0.join("snapshots");
    let snap = snapshots.to_str().unwrap();
    let s = Server::start(&dir.config(), &[("RATECELL_SNAPSHOT_DIR", snap)]);
    for left in [4, 3, 2] {
        let (status, body) = s.json(USER);
        assert_eq!((status, remaining(&body)), (200, left), "{body}");
    }
    let (status, err) = s.terminate();
    assert!(status.success(), "{err}");
    assert!(
        std::fs::read_dir(&snapshots).unwrap().count() > 0,
        "a snapshot was written"
    );
    let s = Server::start(&dir.config(), &[("RATECELL_SNAPSHOT_DIR", snap)]);
    let (status, body) = s.json(USER);
    assert_eq!(
        (status, remaining(&body)),
        (200, 1),
        "the count went on: {body}"
    );
    let (status, _) = s.json(USER);
    assert_eq!(status, 200);
    let (status, body) = s.json(USER);
    assert_eq!(status, 429, "{body}");
}

#[test]
fn a_reload_applies_new_limits_and_a_broken_file_keeps_the_running_ones() {
    let dir = Dir::new("reload");
    dir.write("d.yaml", &limit_file(5));
    let s = Server::start(&dir.config(), &[]);
    assert_eq!(remaining(&s.json(USER).1), 4);

    dir.write("d.yaml", "domain: d\ndescriptors: [ this is not yaml");
    let errors = || {
        get(s.debug, "/metrics")
            .map(|(_, m)| {
                m.lines().any(|l| {
                    l.starts_with("ratelimit_service_config_load_error") && !l.ends_with(" 0")
                })
            })
            .unwrap_or(false)
    };
    assert!(
        (0..POLLS).any(|_| errors() || {
            sleep(POLL);
            false
        }),
        "the broken file was counted as a load error"
    );
    assert_eq!(
        remaining(&s.json(USER).1),
        3,
        "the running limit still applies"
    );

    // 5 → 7 per hour keeps the state's layout: the count carries over.
    dir.write("d.yaml", &limit_file(7));
    let applied = (0..POLLS).find_map(|_| {
        let (_, body) = s.json(r#"{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"u1"}],"hitsAddend":"0"}]}"#);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if v["statuses"][0]["currentLimit"]["requestsPerUnit"] == 7 {
            return Some(remaining(&body));
        }
        sleep(POLL);
        None
    });
    assert_eq!(
        applied,
        Some(5),
        "the new limit, with the two requests already counted"
    );
}

#[test]
fn grpc_over_tls() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};

    let dir = Dir::new("tls");
    dir.write("d.yaml", &limit_file(5));
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    std::fs::write(dir.0.join("cert.pem"), &cert_pem).unwrap();
    std::fs::write(dir.0.join("key.pem"), &key_pem).unwrap();
    let s = Server::start(
        &dir.config(),
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            (
                "GRPC_SERVER_TLS_CERT",
                dir.0.join("cert.pem").to_str().unwrap(),
            ),
            (
                "GRPC_SERVER_TLS_KEY",
                dir.0.join("key.pem").to_str().unwrap(),
            ),
        ],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let request = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".into(),
                    value: "u1".into(),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        };
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&cert_pem))
            .domain_name("localhost");
        let channel = Channel::from_shared(format!("https://127.0.0.1:{}", s.grpc))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let reply = RateLimitServiceClient::new(channel)
            .should_rate_limit(request.clone())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.statuses[0].limit_remaining, 4);

        let plain = Channel::from_shared(format!("http://127.0.0.1:{}", s.grpc))
            .unwrap()
            .connect()
            .await;
        let refused = match plain {
            Err(_) => true,
            Ok(ch) => RateLimitServiceClient::new(ch)
                .should_rate_limit(request)
                .await
                .is_err(),
        };
        assert!(refused, "a plaintext client is not served");
    });
}

#[test]
fn a_limit_leases_cannot_keep_is_refused_naming_its_rule() {
    let dir = Dir::new("unleasable");
    dir.write(
        "d.yaml",
        "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {algorithm: sliding_log, period: 1m, requests_per_unit: 5}\n",
    );
    let out = run_to_exit(
        &dir.config(),
        &[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "127.0.0.1:1"),
            ("RATECELL_REDIS_MODE", "leased"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("d.user") && err.contains("cannot be leased"),
        "{err}"
    );
}
