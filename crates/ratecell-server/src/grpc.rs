//! The gRPC port: `envoy.service.ratelimit.v3.RateLimitService` (what
//! Envoy's `rate_limit_service` calls) and `grpc.health.v1.Health`, with
//! TLS (and client certificates) when the settings ask for it.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

use crate::service::{Service, ServiceError};
use crate::settings::TlsSettings;

struct Rls(Arc<Service>);

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        match self.0.should_rate_limit(request.get_ref()).await {
            Ok(r) => Ok(Response::new(r)),
            Err(e @ ServiceError::Invalid(_)) => Err(Status::invalid_argument(e.to_string())),
            Err(e) => Err(Status::unavailable(e.to_string())),
        }
    }
}

/// The gRPC server with its services, ready to serve.
pub async fn server(
    service: Arc<Service>,
    tls: Option<&TlsSettings>,
) -> Result<
    (
        tonic::transport::server::Router,
        tonic_health::server::HealthReporter,
    ),
    String,
> {
    let mut builder = Server::builder();
    if let Some(t) = tls {
        let read = |p: &std::path::Path, var: &str| {
            std::fs::read(p).map_err(|e| format!("{var}: cannot read {}: {e}", p.display()))
        };
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(
            read(&t.cert, "GRPC_SERVER_TLS_CERT")?,
            read(&t.key, "GRPC_SERVER_TLS_KEY")?,
        ));
        if let Some(ca) = &t.client_ca {
            config =
                config.client_ca_root(Certificate::from_pem(read(ca, "GRPC_CLIENT_TLS_CACERT")?));
        }
        builder = builder
            .tls_config(config)
            .map_err(|e| format!("GRPC_SERVER_TLS_*: {e}"))?;
    }
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<RateLimitServiceServer<Rls>>().await;
    let router = builder
        .add_service(health)
        .add_service(RateLimitServiceServer::new(Rls(service)));
    Ok((router, reporter))
}

/// Marks the service as not serving (on shutdown).
pub async fn not_serving(reporter: &tonic_health::server::HealthReporter) {
    reporter
        .set_not_serving::<RateLimitServiceServer<Rls>>()
        .await;
}
