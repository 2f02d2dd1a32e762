//! The HTTP the scripted endpoints speak: requests read one after another off a kept-alive
//! connection, and replies in the AWS JSON 1.1 protocol.

use std::io::{BufRead, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use serde_json::Value;

/// Listens on a free port of 127.0.0.1, answering each connection with `serve` on a thread of
/// its own; returns the endpoint's URL.
pub fn listen(serve: impl Fn(TcpStream) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { break };
            let serve = serve.clone();
            std::thread::spawn(move || serve(stream));
        }
    });
    url
}

/// One request as an endpoint sees it.
pub struct Request {
    /// The request line and headers as sent, less `Connection` and the blank line that ends
    /// them: what a relay passes on.
    pub head: String,
    /// The `X-Amz-Target` header: service and operation.
    pub target: String,
    pub body: Vec<u8>,
}

/// The next request on the connection; `None` once it ends.
pub fn read_request(reader: &mut impl BufRead) -> Option<Request> {
    let mut target = String::new();
    let mut length = 0usize;
    let mut line = String::new();
    // Request line, then headers up to the blank line; EOF ends the connection.
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut head = line.clone();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if !header.to_ascii_lowercase().starts_with("connection:") {
            head.push_str(&line);
        }
        if let Some((name, value)) = header.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "x-amz-target" => target = value.trim().to_owned(),
                "content-length" => length = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { head, target, body })
}

/// Sends `reply` with `status` (`200 OK`, `400 Bad Request`) as an AWS JSON 1.1 response.
pub fn write_reply(writer: &mut impl Write, status: &str, reply: &Value) -> std::io::Result<()> {
    let text = reply.to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    );
    writer.write_all(response.as_bytes())
}
