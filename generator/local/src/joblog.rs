//! `log.jsonl`: every host's output of a local run, in the order the run showed it, one JSON
//! object per line — the same objects `hetgen logs --format json` prints for a SageMaker job, so
//! one command reads both. Each host's raw output is also in its own `output/log.txt`.

use std::fs::File;
use std::io::{BufRead, BufReader, LineWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::supervise::{Exit, Observer, Stream};
use crate::{Host, LocalError, Step};

/// One line of one host's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When it was written (read, for a local run), RFC 3339 UTC with milliseconds.
    pub time: String,
    /// The host, `algo-1`.
    pub host: String,
    /// Its instance group; `None` while a SageMaker host has not said yet.
    pub group: Option<String>,
    /// The line, without its newline.
    pub message: String,
}

impl LogLine {
    /// A line written at `time`.
    pub fn at(time: SystemTime, host: &str, group: Option<&str>, message: &str) -> LogLine {
        LogLine {
            time: humantime::format_rfc3339_millis(time).to_string(),
            host: host.to_owned(),
            group: group.map(str::to_owned),
            message: message.to_owned(),
        }
    }

    /// A line written `ms` milliseconds after the Unix epoch.
    pub fn at_ms(ms: i64, host: &str, group: Option<&str>, message: &str) -> LogLine {
        let time = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
        LogLine::at(time, host, group, message)
    }

    /// Its time, when it parses.
    pub fn system_time(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339(&self.time).ok()
    }
}

/// An observer that appends every host line to the job's `log.jsonl`, then passes everything
/// on. Lines are written as they come (a line at a time), so `hetgen logs --follow` sees a
/// running job's output; a full disk loses log lines, not the run.
pub struct Recorder<'a> {
    file: Option<LineWriter<File>>,
    inner: &'a mut dyn Observer,
}

impl<'a> Recorder<'a> {
    /// Creates (truncates) `<job_dir>/log.jsonl`.
    pub fn create(job_dir: &Path, inner: &'a mut dyn Observer) -> Result<Recorder<'a>, LocalError> {
        let path = crate::RunDir::at(job_dir).log();
        let file = File::create(&path).map_err(|source| LocalError::Write { path, source })?;
        Ok(Recorder {
            file: Some(LineWriter::new(file)),
            inner,
        })
    }
}

impl Observer for Recorder<'_> {
    fn started(&mut self, host: &Host, pid: u32) {
        self.inner.started(host, pid);
    }

    fn output(&mut self, host: &Host, stream: Stream, line: &str) {
        if let Some(file) = &mut self.file {
            let record = LogLine::at(SystemTime::now(), &host.name, Some(&host.group), line);
            let json = serde_json::to_string(&record).expect("a log line serializes");
            if writeln!(file, "{json}").is_err() {
                self.file = None;
            }
        }
        self.inner.output(host, stream, line);
    }

    fn step(&mut self, host: &Host, step: &Step) {
        self.inner.step(host, step);
    }

    fn exited(&mut self, host: &Host, exit: &Exit) {
        self.inner.exited(host, exit);
    }

    fn stopping(&mut self, reason: &str) {
        self.inner.stopping(reason);
    }
}

/// Reads a local run's `log.jsonl` from where the last read stopped: what a running job wrote
/// since, whole lines only (a line being written is read next time).
pub struct LogReader {
    path: PathBuf,
    offset: u64,
}

impl LogReader {
    /// Reads `<job_dir>/log.jsonl` from its start.
    pub fn new(job_dir: &Path) -> LogReader {
        LogReader {
            path: crate::RunDir::at(job_dir).log(),
            offset: 0,
        }
    }

    /// The lines added since the last call. A line that is not a log line is an error naming
    /// the file and line number.
    pub fn read_new(&mut self) -> Result<Vec<LogLine>, LocalError> {
        let bad = |message: String| LocalError::BadLog {
            path: self.path.clone(),
            message,
        };
        let mut file = File::open(&self.path).map_err(|e| bad(e.to_string()))?;
        file.seek(SeekFrom::Start(self.offset))
            .map_err(|e| bad(e.to_string()))?;
        let mut reader = BufReader::new(file);
        let mut lines = Vec::new();
        let mut buf = String::new();
        loop {
            buf.clear();
            let n = reader.read_line(&mut buf).map_err(|e| bad(e.to_string()))?;
            if n == 0 || !buf.ends_with('\n') {
                return Ok(lines);
            }
            let line = serde_json::from_str(buf.trim_end())
                .map_err(|e| bad(format!("at byte {}: {e}", self.offset)))?;
            lines.push(line);
            self.offset += n as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::LOG_FILE;

    #[test]
    fn lines_are_read_once_and_only_when_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE);
        let one = LogLine::at_ms(1_733_323_549_123, "algo-1", Some("dnn_group"), "hello");
        assert_eq!(one.time, "2024-12-04T14:45:49.123Z");
        let mut text = serde_json::to_string(&one).unwrap() + "\n";
        std::fs::write(&path, &text).unwrap();
        let mut reader = LogReader::new(dir.path());
        assert_eq!(reader.read_new().unwrap(), vec![one.clone()]);
        assert_eq!(reader.read_new().unwrap(), vec![]);
        // Half a line: not yet.
        let two = LogLine::at_ms(1_733_323_549_200, "algo-2", None, "world");
        let json = serde_json::to_string(&two).unwrap();
        text.push_str(&json[..10]);
        std::fs::write(&path, &text).unwrap();
        assert_eq!(reader.read_new().unwrap(), vec![]);
        text.push_str(&json[10..]);
        text.push('\n');
        std::fs::write(&path, &text).unwrap();
        assert_eq!(reader.read_new().unwrap(), vec![two]);
    }

    #[test]
    fn a_line_that_is_not_a_log_line_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOG_FILE), "not json\n").unwrap();
        let err = LogReader::new(dir.path()).read_new().unwrap_err();
        assert!(err.to_string().contains(LOG_FILE), "{err}");
    }
}
