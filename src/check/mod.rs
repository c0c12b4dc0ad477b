//! A check: what it asks (the key, and the cost, time and tier of a
//! [`Request`](request::Request), or a [`Batch`](request::Batch) of them),
//! what it answers ([`Decision`](decision::Decision)), and waiting until
//! the answer is yes ([`acquire`](acquire::acquire)). The ground floor:
//! every limiter speaks these types, and they import nothing of the
//! limiters.

pub(crate) mod acquire;
pub(crate) mod decision;
pub(crate) mod request;
