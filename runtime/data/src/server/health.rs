//! The standard gRPC health service (`grpc.health.v1.Health`) on the data port, so that a
//! readiness probe (kubelet's `grpc` probe on Kubernetes) can tell when a data server takes
//! trainers: SERVING for the whole server (`""`, what a probe without a service name asks)
//! and for `hetgen.data.v1.DataService` from when the server accepts connections, NOT_SERVING
//! once it is stopping (a Shutdown, the watchdog, or the end of a signal's drain). While a
//! signal's drain lasts the server still serves its trainers, and says so.
//!
//! A probe carries no job token, so Health answers without one; every other call still needs
//! it (the token check wraps only the data service). A probe's connection never vouches for
//! itself, so it stays a *guest* (`connections`): closed 5 s after it connected, within the
//! guests' own cap (an eighth of the connections), and the first to give way when the
//! connections are full. A peer that floods the port with health checks therefore holds no
//! more than any other guest and cannot keep a trainer out. Its request is read under the same
//! size limit as the data service's unary calls.

use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};

use super::config::MAX_UNARY_REQUEST;
use super::service::Service;
use super::state::StopReason;
use crate::proto::data_service_server::DataServiceServer;

/// The whole server, as a probe that names no service asks for it.
const WHOLE_SERVER: &str = "";

/// The health service of a server that accepts trainers now and stops when `stop` says so.
pub(crate) async fn service(
    mut stop: watch::Receiver<Option<StopReason>>,
) -> HealthServer<impl Health> {
    let (reporter, service) = tonic_health::server::health_reporter();
    // Before the server is built: a probe that comes with the first connection finds the data
    // service named too.
    reporter.set_serving::<DataServiceServer<Service>>().await;
    tokio::spawn(async move {
        // A closed channel means the server is gone: nobody is left to ask.
        if stop.wait_for(Option::is_some).await.is_ok() {
            reporter
                .set_not_serving::<DataServiceServer<Service>>()
                .await;
            reporter
                .set_service_status(WHOLE_SERVER, ServingStatus::NotServing)
                .await;
        }
    });
    service.max_decoding_message_size(MAX_UNARY_REQUEST)
}
