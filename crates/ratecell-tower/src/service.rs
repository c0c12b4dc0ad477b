//! The tower [`Service`], [`RateLimit`]: asks the layer's settings about a
//! request once, then forwards it (adding the RateLimit fields to the
//! response, after a leaky bucket's queue wait) or answers it (429, or 400,
//! 500 and 503), through its [`ResponseFuture`]; a store's decision is
//! awaited in that future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use tower_service::Service;

use crate::limits::StoreError;
use crate::response::{Fields, Outcome, missing_key, no_client_addr, unavailable};
use crate::settings::{Settings, StoreFailurePolicy, Verdict};

/// The service [`RateLimitLayer`] wraps around another.
#[derive(Clone)]
pub struct RateLimit<S> {
    pub(crate) inner: S,
    pub(crate) settings: Arc<Settings>,
}

impl<S> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Calls `ready` with `req` once `wait_ns` has passed (a leaky bucket's
/// queue place: no thread is held meanwhile), and adds `fields` to its
/// response.
async fn forward_after<S, ReqB, ResB>(
    mut ready: S,
    req: Request<ReqB>,
    fields: Fields,
    wait_ns: u64,
) -> Result<Response<ResB>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    if wait_ns > 0 {
        futures_timer::Delay::new(Duration::from_nanos(wait_ns)).await;
    }
    let mut res = ready.call(req).await?;
    fields.add_to(res.headers_mut());
    Ok(res)
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`].
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        // Forwarded: the inner service's future, and the fields to add
        // (none for an exempt request).
        Inner { #[pin] future: F, fields: Option<Fields> },
        // Forwarded after a leaky bucket's queue wait, or decided by a
        // store first.
        Later { future: BoxFuture<Result<Response<B>, E>> },
        // Answered here (429, 400 or 500).
        Ready { response: Option<Response<B>> },
    }
}

fn wrap<F, B, E>(state: State<F, B, E>) -> ResponseFuture<F, B, E> {
    ResponseFuture { state }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { future, fields } => {
                let mut res = std::task::ready!(future.poll(cx))?;
                if let Some(fields) = fields.take() {
                    fields.add_to(res.headers_mut());
                }
                Poll::Ready(Ok(res))
            }
            StateProj::Later { future } => future.as_mut().poll(cx),
            StateProj::Ready { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
        }
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqB: Send + 'static,
    ResB: From<Bytes> + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let verdict = self.settings.decide(&parts);
        match verdict {
            Verdict::Pass => wrap(State::Inner {
                future: self.inner.call(Request::from_parts(parts, body)),
                fields: None,
            }),
            Verdict::BadRequest => wrap(State::Ready {
                response: Some(missing_key()),
            }),
            Verdict::NoClientAddr => wrap(State::Ready {
                response: Some(no_client_addr()),
            }),
            Verdict::Limited(items) => match self.settings.outcome(&parts, &items) {
                Outcome::Answer(res) => wrap(State::Ready {
                    response: Some(res.map(ResB::from)),
                }),
                Outcome::Forward { fields, wait: 0 } => wrap(State::Inner {
                    future: self.inner.call(Request::from_parts(parts, body)),
                    fields: Some(fields),
                }),
                Outcome::Forward { fields, wait } => {
                    let req = Request::from_parts(parts, body);
                    wrap(State::Later {
                        future: Box::pin(forward_after(self.take_ready(), req, fields, wait)),
                    })
                }
            },
            Verdict::Ask(check) => {
                let ready = self.take_ready();
                let settings = self.settings.clone();
                wrap(State::Later {
                    future: Box::pin(async move {
                        let outcome = match check.await {
                            Ok(items) if !items.is_empty() => settings.outcome(&parts, &items),
                            failed => {
                                let error = failed.err().unwrap_or_else(|| {
                                    StoreError::BadReply("no decisions".to_owned())
                                });
                                settings.store_failed(&parts, &error);
                                let req = Request::from_parts(parts, body);
                                return match settings.failure {
                                    StoreFailurePolicy::ServiceUnavailable => Ok(unavailable()),
                                    StoreFailurePolicy::FailOpen => {
                                        let mut ready = ready;
                                        ready.call(req).await
                                    }
                                };
                            }
                        };
                        let req = Request::from_parts(parts, body);
                        match outcome {
                            Outcome::Answer(res) => Ok(res.map(ResB::from)),
                            Outcome::Forward { fields, wait } => {
                                forward_after(ready, req, fields, wait).await
                            }
                        }
                    }),
                })
            }
        }
    }
}

impl<S: Clone> RateLimit<S> {
    /// The inner service, made ready by `poll_ready` for this call, to be
    /// called later from the response future; a clone stays here for the
    /// next `poll_ready`.
    fn take_ready(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}
