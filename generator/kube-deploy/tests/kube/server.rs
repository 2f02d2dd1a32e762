//! A plain-HTTP stand-in for the API server: it answers each request with the recorded
//! response for its method and path (see `tests/recorded/README.md`), and keeps every request
//! it got, in order, for the test to check.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::Deserialize;
use serde_json::Value;

/// One recorded exchange of a scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Exchange {
    request: Expected,
    response: Response,
}

/// What a request must be to get this exchange's response.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    method: String,
    path: String,
    /// Query parameters the request must carry (others may be there too).
    #[serde(default)]
    query: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Response {
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// A JSON body, sent as `application/json`.
    #[serde(default)]
    body: Option<Value>,
    /// A text body, sent as it is (a log, the plain-text 404).
    #[serde(default)]
    text: Option<String>,
}

/// A request as the server got it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

impl Request {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} {} sent a body that is not JSON ({e}): {}",
                self.method, self.path, self.body
            )
        })
    }

    /// `METHOD path`.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

struct State {
    exchanges: Vec<Exchange>,
    served: Vec<bool>,
    requests: Vec<Request>,
    /// Requests no exchange matched (each got a 599, which no API server sends).
    unmatched: Vec<String>,
}

/// The running server; it stops when dropped.
pub struct Server {
    port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Holds the kubeconfig.
    dir: tempfile::TempDir,
}

/// The folder of the recorded responses.
pub fn recorded() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/recorded")
}

impl Server {
    /// Serves the exchanges of `tests/recorded/<scenario>.json`.
    pub fn start(scenario: &str) -> Server {
        let path = recorded().join(format!("{scenario}.json"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let exchanges: Vec<Exchange> =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            served: vec![false; exchanges.len()],
            exchanges,
            requests: Vec::new(),
            unmatched: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let state = Arc::clone(&state);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if let Ok(stream) = stream {
                        // A connection the client drops half-way is its business, not the
                        // server's: the test sees the missing request.
                        let _ = serve(stream, &state);
                    }
                }
            })
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kubeconfig"),
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: recorded
  cluster:
    server: http://127.0.0.1:{port}
users:
- name: tester
  user:
    token: recorded-token
contexts:
- name: recorded
  context:
    cluster: recorded
    user: tester
    namespace: default
current-context: recorded
"
            ),
        )
        .unwrap();
        Server {
            port,
            state,
            stop,
            thread: Some(thread),
            dir,
        }
    }

    /// A kubeconfig whose current context is this server.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }

    /// `METHOD path` of every request so far.
    pub fn lines(&self) -> Vec<String> {
        self.requests().iter().map(Request::line).collect()
    }

    /// Requests no recorded exchange matched.
    pub fn unmatched(&self) -> Vec<String> {
        self.state.lock().unwrap().unmatched.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request from `stream`, answers it, and closes the connection.
#[allow(
    clippy::too_many_lines,
    reason = "the fake API server's routes, one match a reader scans like a table"
)]
fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = String::new();
    if reader.read_line(&mut first)? == 0 {
        return Ok(());
    }
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let body = if let Some(len) = headers.get("content-length") {
        let mut body = vec![0; len.parse().unwrap_or(0)];
        reader.read_exact(&mut body)?;
        body
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        read_chunked(&mut reader)?
    } else {
        Vec::new()
    };
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), parse_query(query)),
        None => (target.clone(), BTreeMap::new()),
    };
    let request = Request {
        method,
        path,
        query,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let response = {
        let mut state = state.lock().unwrap();
        let response = pick(&mut state, &request);
        if response.is_none() {
            state.unmatched.push(format!("{} {target}", request.method));
        }
        state.requests.push(request);
        response
    };
    let (status, content_type, body, extra) = match response {
        Some(r) => match (&r.body, &r.text) {
            (Some(json), _) => (
                r.status,
                "application/json".to_owned(),
                json.to_string(),
                r.headers,
            ),
            (None, Some(text)) => (
                r.status,
                r.headers
                    .get("Content-Type")
                    .cloned()
                    .unwrap_or_else(|| "text/plain".to_owned()),
                text.clone(),
                r.headers,
            ),
            (None, None) => (r.status, "text/plain".to_owned(), String::new(), r.headers),
        },
        None => (
            599,
            "text/plain".to_owned(),
            "no recorded response".to_owned(),
            BTreeMap::new(),
        ),
    };
    let mut out = stream;
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in &extra {
        if !k.eq_ignore_ascii_case("content-type") {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())?;
    out.flush()
}

/// The first exchange not served yet that `request` matches; when every match has been served,
/// the last of them again (a status polled until it changes).
fn pick(state: &mut State, request: &Request) -> Option<Response> {
    let matching: Vec<usize> = (0..state.exchanges.len())
        .filter(|&i| matches(&state.exchanges[i].request, request))
        .collect();
    let i = matching
        .iter()
        .copied()
        .find(|&i| !state.served[i])
        .or_else(|| matching.last().copied())?;
    state.served[i] = true;
    Some(state.exchanges[i].response.clone())
}

fn matches(expected: &Expected, request: &Request) -> bool {
    expected.method == request.method
        && expected.path == request.path
        && expected
            .query
            .iter()
            .all(|(k, v)| request.query.get(k) == Some(v))
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Percent-decoding, `+` as a space (form encoding, as kube writes queries).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if size == 0 {
            let mut end = String::new();
            reader.read_line(&mut end)?;
            return Ok(body);
        }
        let mut chunk = vec![0; size];
        reader.read_exact(&mut chunk)?;
        body.extend(chunk);
        let mut crlf = String::new();
        reader.read_line(&mut crlf)?;
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        _ => "Status",
    }
}
