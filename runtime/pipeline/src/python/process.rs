//! One Python worker process and the conversation with it (the protocol is described at the
//! top of `worker.py`): started, handed its setup, asked for batches, and killed when dropped.

use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::tensor::{DType, Tensor};

/// Largest message a worker may send (its batch's description, or a traceback).
const MAX_MESSAGE: usize = 64 << 20;

/// What a worker made of a batch request.
pub(super) struct Made {
    pub(super) data: Bytes,
    pub(super) tensors: Vec<Tensor>,
    pub(super) structure: String,
}

/// Why a batch request did not give a batch.
pub(super) enum Failed {
    /// The user's code (or its samples) failed: `kind` is `getitem`, `collate`, `stack`,
    /// `type` or `write`; `sample` the id when one is to blame.
    User {
        kind: String,
        message: String,
        sample: Option<u64>,
    },
    /// The process is gone (killed, crashed), or broke the protocol.
    Died(String),
}

/// A worker that is running and has built the dataset.
pub(super) struct Process {
    child: Child,
    conn: UnixStream,
    dir: PathBuf,
    next_file: u64,
    name: String,
}

#[derive(Deserialize)]
struct WireTensor {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    offset: u64,
}

impl Process {
    /// Starts the worker `name` with `command`, sends it `setup` and waits until its dataset is
    /// built: `Ok((process, samples))`, or the traceback of why it could not be.
    pub(super) fn start(
        mut command: Command,
        dir: &Path,
        name: &str,
        setup: &Value,
    ) -> Result<(Process, u64), String> {
        let socket = dir.join(format!("{name}.sock"));
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
        let mut child = command
            .env("HETGEN_WORKER_SOCKET", &socket)
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", command.get_program()))?;
        // The worker connects once its interpreter is up; it may instead exit (no numpy, a
        // broken interpreter), which is then the reason.
        let conn = loop {
            match listener.accept() {
                Ok((conn, _)) => break conn,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Ok(Some(status)) = child.try_wait() {
                        return Err(format!(
                            "the Python worker exited ({}) before it started; its output is above",
                            describe(status)
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(format!("cannot accept the Python worker: {e}")),
            }
        };
        let _ = std::fs::remove_file(&socket);
        conn.set_nonblocking(false)
            .map_err(|e| format!("the worker's socket: {e}"))?;
        let mut process = Process {
            child,
            conn,
            dir: dir.to_owned(),
            next_file: 0,
            name: name.to_owned(),
        };
        let reply = process
            .send(&json!({ "setup": setup }))
            .and_then(|()| process.receive());
        match reply {
            Ok(reply) => {
                if let Some(len) = reply.pointer("/ready/len").and_then(Value::as_u64) {
                    Ok((process, len))
                } else if let Some(message) =
                    reply.pointer("/error/message").and_then(Value::as_str)
                {
                    Err(message.to_owned())
                } else {
                    Err(format!("the Python worker answered its setup with {reply}"))
                }
            }
            Err(_) => Err(format!(
                "the Python worker died while building the dataset ({})",
                process.exit_status()
            )),
        }
    }

    /// The operating system's id of the process.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sample `ids` of `epoch`, made and collated by the worker.
    pub(super) fn batch(&mut self, epoch: u32, ids: &[u64]) -> Result<Made, Failed> {
        self.next_file += 1;
        let file = format!("{}-{}", self.name, self.next_file);
        let died = |process: &mut Process| Failed::Died(process.exit_status());
        if self
            .send(&json!({ "batch": { "epoch": epoch, "ids": ids, "file": file } }))
            .is_err()
        {
            return Err(died(self));
        }
        let Ok(reply) = self.receive() else {
            return Err(died(self));
        };
        if let Some(error) = reply.get("error") {
            return Err(Failed::User {
                kind: error["kind"].as_str().unwrap_or("worker").to_owned(),
                message: error["message"].as_str().unwrap_or_default().to_owned(),
                sample: error["sample"].as_u64(),
            });
        }
        let made = reply
            .get("made")
            .ok_or_else(|| Failed::Died(format!("the worker answered {reply}")))?;
        self.collect(&file, made).map_err(Failed::Died)
    }

    /// The batch the worker wrote to `file`, mapped: its pages are the batch's bytes from here
    /// to the socket. The file is unlinked at once, so the memory is the mapping's alone and
    /// returns to the system when the last `Bytes` of it is dropped.
    fn collect(&self, file: &str, made: &Value) -> Result<Made, String> {
        let bytes = made["bytes"].as_u64().ok_or("a batch without its size")? as usize;
        let structure = made["structure"].as_str().unwrap_or_default().to_owned();
        let wire: Vec<WireTensor> = serde_json::from_value(made["tensors"].clone())
            .map_err(|e| format!("a batch's tensors: {e}"))?;
        let tensors = wire
            .into_iter()
            .map(|t| {
                Ok(Tensor {
                    dtype: DType::from_name(&t.dtype)
                        .ok_or_else(|| format!("tensor `{}` of dtype {}", t.name, t.dtype))?,
                    name: t.name,
                    shape: t.shape,
                    offset: t.offset,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let data = if bytes == 0 {
            Bytes::new()
        } else {
            let path = self.dir.join(file);
            let opened = std::fs::File::open(&path);
            let _ = std::fs::remove_file(&path);
            let opened = opened.map_err(|e| format!("{}: {e}", path.display()))?;
            // A private mapping: a consumer that writes into the batch (numpy arrays over it
            // are writable, as `torch.from_numpy` expects) gets its own copy of that page.
            // SAFETY: the file is this worker's, written in full before it answered, and
            // already unlinked: nothing writes to it again while the mapping lives.
            let map = unsafe { memmap2::MmapOptions::new().map_copy(&opened) }
                .map_err(|e| format!("cannot map {}: {e}", path.display()))?;
            if map.len() != bytes {
                return Err(format!(
                    "{} holds {} bytes, not {bytes}",
                    path.display(),
                    map.len()
                ));
            }
            Bytes::from_owner(map)
        };
        Tensor::check_all(&tensors, data.len())?;
        Ok(Made {
            data,
            tensors,
            structure,
        })
    }

    fn send(&mut self, message: &Value) -> io::Result<()> {
        let body = serde_json::to_vec(message)?;
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        self.conn.write_all(&frame)
    }

    fn receive(&mut self) -> io::Result<Value> {
        let mut head = [0u8; 4];
        self.conn.read_exact(&mut head)?;
        let len = u32::from_le_bytes(head) as usize;
        if len > MAX_MESSAGE {
            return Err(io::Error::other(format!("a {len}-byte message")));
        }
        let mut body = vec![0u8; len];
        self.conn.read_exact(&mut body)?;
        Ok(serde_json::from_slice(&body)?)
    }

    /// How the process ended (it is killed first if it has not).
    fn exit_status(&mut self) -> String {
        let _ = self.conn.shutdown(std::net::Shutdown::Both);
        // A worker whose socket broke but that still runs is stuck: it goes.
        let status = match self.child.try_wait() {
            Ok(Some(status)) => Ok(status),
            _ => {
                std::thread::sleep(Duration::from_millis(50));
                match self.child.try_wait() {
                    Ok(Some(status)) => Ok(status),
                    _ => {
                        let _ = self.child.kill();
                        self.child.wait()
                    }
                }
            }
        };
        match status {
            Ok(status) => describe(status),
            Err(e) => format!("its status is unknown: {e}"),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `exit status 3`, or `killed by signal 9 (SIGKILL)`.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal} ({})", signal_name(signal)),
        _ => status.to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "SIGKILL: the OOM killer, or a kill -9",
        libc::SIGSEGV => "SIGSEGV: a crash in native code",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS: out of shared memory?",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "a signal",
    }
}
