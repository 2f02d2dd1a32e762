//! Reaching the data hosts: name resolution and connection with backoff, then the handshake;
//! what that makes, a [`Server`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hetgen_env::HostsFile;
use hetgen_spec::model::Pipeline;
use tonic::codegen::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use super::config::ClientConfig;
use super::error::ClientError;
use crate::auth::AttachToken;
use crate::job::resolve;
use crate::proto::data_service_client::DataServiceClient;
use crate::proto::{DType, HandshakeRequest, HandshakeResponse};
use crate::server::{BUILDING, building_for};
use crate::{CONNECTION_WINDOW, MAX_FRAME, MAX_MESSAGE_BYTES, PROTOCOL_VERSION, STREAM_WINDOW};

/// The generated client with the job token attached to every call.
pub type ServiceClient = DataServiceClient<InterceptedService<Channel, AttachToken>>;

/// One connected data server.
#[derive(Clone)]
pub struct Server {
    /// Its host name.
    pub host: String,
    /// The address it was reached at.
    pub address: SocketAddr,
    /// What it said in the handshake.
    pub info: HandshakeResponse,
    pub(crate) client: ServiceClient,
}

/// The local cluster's hosts file, if there is one.
fn hosts_file() -> Result<HostsFile, ClientError> {
    HostsFile::from_env().map_err(|e| ClientError::Mismatch {
        host: hetgen_env::HOSTS_FILE_VAR.to_owned(),
        message: e.to_string(),
    })
}

/// How a trainer reaches the data server at `address`.
fn endpoint(address: SocketAddr) -> Endpoint {
    Endpoint::from_shared(format!("http://{address}"))
        .expect("a socket address is a valid URI")
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        // The frame size a peer may send is the receiver's setting: without this the servers'
        // batches arrive in 16 KiB frames, a thousand per batch.
        .max_frame_size(MAX_FRAME)
}

fn service_client(channel: tonic::transport::Channel, token: AttachToken) -> ServiceClient {
    DataServiceClient::with_interceptor(channel, token)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// A client of each of `hosts` that connects on its first call, without a handshake: for a
/// caller with one thing to say (a launcher's Shutdown), which must not wait on a server that
/// accepts connections but does not answer. Hosts that cannot be resolved are returned apart,
/// with why.
pub(super) async fn reach_lazily(
    hosts: &[(String, u16)],
    token: &str,
) -> Result<(Vec<(String, ServiceClient)>, Vec<(String, String)>), ClientError> {
    let table = hosts_file()?;
    let token = AttachToken::new(token)?;
    let (mut reached, mut unresolved) = (Vec::new(), Vec::new());
    for (host, port) in hosts {
        match resolve(&table, host, *port).await {
            Ok(address) => reached.push((
                host.clone(),
                service_client(endpoint(address).connect_lazy(), token.clone()),
            )),
            Err(e) => unresolved.push((host.clone(), format!("cannot resolve: {e}"))),
        }
    }
    Ok((reached, unresolved))
}

pub(super) async fn connect_all(
    hosts: &[(String, u16)],
    shape: [u32; 3],
    config: &ClientConfig,
) -> Result<Vec<Server>, ClientError> {
    let table = hosts_file()?;
    let token = AttachToken::new(&config.token)?;
    let tasks: Vec<_> = hosts
        .iter()
        .map(|(host, port)| {
            let (host, port, table, token) = (host.clone(), *port, table.clone(), token.clone());
            let config = config.clone();
            tokio::spawn(async move { connect_one(&table, &host, port, token, &config).await })
        })
        .collect();
    let mut servers = Vec::with_capacity(tasks.len());
    for task in tasks {
        servers.push(task.await.expect("connect task panicked")?);
    }
    for server in &servers {
        check_schema(server, shape)?;
        let (info, first) = (&server.info, &servers[0].info);
        if (info.samples_per_epoch, info.shards) != (first.samples_per_epoch, first.shards) {
            return Err(ClientError::Mismatch {
                host: server.host.clone(),
                message: format!(
                    "reports {} but {} reports {}: the hosts run different jobs",
                    size(info.samples_per_epoch, info.shards),
                    servers[0].host,
                    size(first.samples_per_epoch, first.shards),
                ),
            });
        }
    }
    Ok(servers)
}

/// A source's size as a message says it.
fn size(samples: u64, shards: u32) -> String {
    if shards > 0 {
        format!("a dataset of {shards} shards")
    } else {
        format!("{samples} samples per epoch")
    }
}

fn check_schema(server: &Server, shape: [u32; 3]) -> Result<(), ClientError> {
    let images = server.info.tensors.iter().find(|t| t.name == "images");
    if shape == Pipeline::UNKNOWN_SHAPE {
        // The job's source is a Python dataset: its servers announce no image shape.
        return match images {
            None => Ok(()),
            Some(_) => Err(ClientError::Mismatch {
                host: server.host.clone(),
                message: "serves built-in images, but the job's source is a Python dataset: \
                          the hosts run different jobs"
                    .into(),
            }),
        };
    }
    match images {
        Some(t) if t.dtype == DType::DtypeUint8 as i32 && t.shape == shape => Ok(()),
        Some(t) => Err(ClientError::Mismatch {
            host: server.host.clone(),
            message: format!(
                "sends images of shape {:?} (dtype {}), the job expects {shape:?} uint8",
                t.shape, t.dtype
            ),
        }),
        None => Err(ClientError::Mismatch {
            host: server.host.clone(),
            message: "sends no `images` tensor".into(),
        }),
    }
}

async fn connect_one(
    table: &HostsFile,
    host: &str,
    port: u16,
    token: AttachToken,
    config: &ClientConfig,
) -> Result<Server, ClientError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut last_error;
    let mut said_building: Option<Instant> = None;
    loop {
        // An attempt is bounded by the time left: a host that accepts the connection but does
        // not answer (its process frozen, say) must not hold the caller past its timeout.
        let left = config
            .connect_timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(100));
        let attempt =
            tokio::time::timeout(left, try_connect(table, host, port, token.clone(), config));
        match attempt.await {
            Ok(Ok(server)) => return Ok(server),
            // A server that answers but refuses is not going to change its mind.
            Ok(Err(Attempt::Refused(e))) => return Err(e),
            Ok(Err(Attempt::NotYet(e))) => last_error = e,
            Err(_) => last_error = format!("no answer to the handshake within {left:?}"),
        }
        let building = building_for(&last_error);
        if let Some(seconds) = building
            && said_building.is_none_or(|said| said.elapsed() >= SAY_BUILDING_EVERY)
        {
            said_building = Some(Instant::now());
            say(&format!("waiting for {host}: {BUILDING}: {seconds} s"));
        }
        if started.elapsed() >= config.connect_timeout {
            return Err(match building {
                Some(seconds) => ClientError::StillBuilding {
                    host: host.to_owned(),
                    timeout: config.connect_timeout,
                    seconds,
                },
                None => ClientError::Unreachable {
                    host: host.to_owned(),
                    timeout: config.connect_timeout,
                    last_error,
                },
            });
        }
        tracing::debug!(%host, error = %last_error, "data host not reachable yet; retrying");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Whether `status` is the connection failing under the call, closed before the answer came
/// (a host handing its port from "still building" to its server, or going away), rather than
/// an answer: tonic reports that with its transport error as the status's source (`Unknown`
/// once the HTTP/2 connection was up, `Cancelled` before), which no server's answer has.
fn connection_failed(status: &tonic::Status) -> bool {
    std::error::Error::source(status).is_some_and(|s| s.is::<tonic::transport::Error>())
}

/// How often a trainer says it is still waiting for a host building its dataset.
const SAY_BUILDING_EVERY: Duration = Duration::from_secs(10);

/// A line for the user: through `tracing` where a subscriber is set (hetgen's own processes),
/// else on stderr (a script's `hetgen.Loader`, whose output is the job's log).
fn say(line: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::info!("{line}");
    } else {
        eprintln!("hetgen: {line}");
    }
}

enum Attempt {
    NotYet(String),
    Refused(ClientError),
}

async fn try_connect(
    table: &HostsFile,
    host: &str,
    port: u16,
    token: AttachToken,
    config: &ClientConfig,
) -> Result<Server, Attempt> {
    let address = resolve(table, host, port)
        .await
        .map_err(|e| Attempt::NotYet(format!("cannot resolve {host}: {e}")))?;
    let channel = endpoint(address)
        .connect()
        .await
        .map_err(|e| Attempt::NotYet(format!("cannot connect to {address}: {e}")))?;
    let mut client = service_client(channel, token);
    let request = HandshakeRequest {
        protocol_version: PROTOCOL_VERSION,
        trainer_id: config.trainer_id.clone(),
    };
    let info = match client.handshake(request).await {
        Ok(response) => response.into_inner(),
        Err(status) if status.code() == tonic::Code::Unavailable || connection_failed(&status) => {
            return Err(Attempt::NotYet(status.message().to_owned()));
        }
        Err(status) => {
            return Err(Attempt::Refused(ClientError::Handshake {
                host: host.to_owned(),
                status: format!("{:?}: {}", status.code(), status.message()),
            }));
        }
    };
    if info.protocol_version != PROTOCOL_VERSION {
        return Err(Attempt::Refused(ClientError::Mismatch {
            host: host.to_owned(),
            message: format!(
                "speaks protocol version {}, this trainer {PROTOCOL_VERSION}",
                info.protocol_version
            ),
        }));
    }
    tracing::info!(%host, %address, cores = info.cores, credits = info.max_inflight_shards, "data server connected");
    Ok(Server {
        host: host.to_owned(),
        address,
        info,
        client,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_closed_under_the_handshake_is_not_an_answer() {
        // A host whose port is handed from one server to another may close a connection it
        // accepted before answering: that is no refusal, and the trainer tries again.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                drop(socket);
            }
        });
        let token = AttachToken::new(&"t".repeat(32)).unwrap();
        let mut client = service_client(endpoint(address).connect_lazy(), token);
        let status = client
            .handshake(HandshakeRequest {
                protocol_version: PROTOCOL_VERSION,
                trainer_id: "test/rank-0".into(),
            })
            .await
            .unwrap_err();
        assert!(connection_failed(&status), "{status:?}");
        assert!(!connection_failed(&tonic::Status::unknown(
            "transport error"
        )));
    }
}
