//! `ratecell-server`: a rate-limit service for proxies. It speaks
//! envoyproxy/ratelimit's gRPC API, reads its configuration files and
//! environment, and serves its HTTP endpoints, with ratecell's seven
//! algorithms and a backend in memory or in Redis (strict or leased).
//! See docs/SERVER.md.

mod backend;
mod config;
mod grpc;
mod http;
mod json;
mod reload;
mod service;
mod settings;
mod stats;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::serve::ListenerExt;
use clap::Parser;
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::backend::Backend;
use crate::http::Health;
use crate::reload::Source;
use crate::service::{Options, Service};
use crate::settings::{ProcessEnv, Settings};

/// A rate-limit service for Envoy, nginx and other proxies: envoyproxy/ratelimit's
/// API, configuration and environment, with ratecell's algorithms.
///
/// Everything else is set by environment variables, under envoyproxy/ratelimit's
/// names (GRPC_PORT, PORT, DEBUG_PORT, RUNTIME_ROOT, REDIS_URL, ...): see docs/SERVER.md.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The directory of configuration files (instead of RUNTIME_ROOT,
    /// RUNTIME_SUBDIRECTORY and RUNTIME_APPDIRECTORY).
    #[arg(long, value_name = "DIR")]
    config_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let settings = match Settings::from_env(&ProcessEnv, args.config_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ratecell-server: {e}");
            return ExitCode::from(2);
        }
    };
    init_logs(&settings);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ratecell-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("ratecell-server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logs(s: &Settings) {
    let filter = tracing_subscriber::EnvFilter::try_new(format!(
        "ratecell_server={0},ratecell={0}",
        s.log_level
    ))
    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("ratecell_server=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if s.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({what}): {e}"))
}

/// Resolves when SIGTERM (listened for since `term` was made) or SIGINT
/// arrives.
async fn terminated(term: Option<tokio::signal::unix::Signal>) {
    match term {
        Some(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn run(settings: Settings) -> Result<(), String> {
    // Listened for before anything serves: a SIGTERM that arrives once the
    // health check answers is a graceful shutdown, not the default death.
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| tracing::error!("cannot listen for SIGTERM: {e}"))
        .ok();
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot set up the metrics: {e}"))?;
    let source = Source {
        dir: settings.config_dir.clone(),
        watch: settings.watch_dir.clone(),
        ignore_dotfiles: settings.ignore_dotfiles,
        merge_domains: settings.merge_domains,
        healthy_with_config: settings.healthy_with_config,
    };
    let config = source
        .load()
        .map_err(|e| format!("error loading the configuration: {e}"))?;
    stats::config_load(true);
    let backend = Backend::new(&settings, &config).await?;
    tracing::info!(backend = backend.name(), dir = %settings.config_dir.display(), "configuration loaded");
    let service = Arc::new(Service::new(
        config,
        backend,
        Options {
            near_limit_ratio: settings.near_limit_ratio,
            shadow_mode: settings.shadow_mode,
            headers: settings.headers.clone(),
            cache_key_prefix: settings.cache_key_prefix.clone(),
        },
    ));
    let health = Arc::new(Health::default());
    health.set(!settings.healthy_with_config || !service.config().is_empty());

    let http_listener = bind(settings.http_addr, "PORT").await?;
    let grpc_listener = bind(settings.grpc_addr, "GRPC_PORT").await?;
    let debug_listener = bind(settings.debug_addr, "DEBUG_PORT").await?;
    let prom_listener = match &settings.prometheus {
        Some((addr, _)) => Some(bind(*addr, "PROMETHEUS_ADDR").await?),
        None => None,
    };
    let _watcher = reload::watch(source, service.clone(), health.clone())
        .map_err(|e| format!("cannot watch {}: {e}", settings.watch_dir.display()))?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let (grpc_router, reporter) = grpc::server(service.clone(), settings.tls.as_ref()).await?;
    let grpc_task = tokio::spawn(grpc_router.serve_with_incoming_shutdown(
        // Without TCP_NODELAY a small reply waits for the client's delayed
        // ACK: 40 ms a request.
        tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
        stopped(),
    ));
    let serve_http = |listener: TcpListener, router: axum::Router| {
        let stop = stopped();
        tokio::spawn(async move {
            // TCP_NODELAY, as on the gRPC port: forward auth answers a
            // small response per request.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(
                listener,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(stop)
            .await
        })
    };
    let mut http_tasks = vec![
        serve_http(http_listener, http::router(service.clone(), health.clone())),
        serve_http(
            debug_listener,
            http::debug_router(service.clone(), metrics.clone()),
        ),
    ];
    if let (Some(l), Some((_, path))) = (prom_listener, &settings.prometheus) {
        http_tasks.push(serve_http(l, http::metrics_router(path, metrics.clone())));
    }
    tracing::info!(
        grpc = %settings.grpc_addr, http = %settings.http_addr, debug = %settings.debug_addr,
        "ratecell-server is serving"
    );

    terminated(term).await;
    tracing::info!("shutting down: finishing the requests in flight");
    health.set(false);
    grpc::not_serving(&reporter).await;
    let _ = stop_tx.send(true);
    if let Ok(Err(e)) = grpc_task.await {
        tracing::error!("gRPC server: {e}");
    }
    for t in http_tasks {
        if let Ok(Err(e)) = t.await {
            tracing::error!("HTTP server: {e}");
        }
    }
    service.backend.shutdown();
    Ok(())
}
