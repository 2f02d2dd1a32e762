//! A hosts file consulted before DNS.
//!
//! `hetgen deploy --local` gives every simulated host its own loopback address and writes
//! `127.x.y.z algo-N` lines to a file named by `HETGEN_HOSTS_FILE`; resolving through it needs no
//! privileges (unlike editing /etc/hosts or network namespaces). On SageMaker the variable is
//! unset and names resolve through DNS as usual.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use crate::{EnvError, HOSTS_FILE_VAR};

/// Name → address pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostsFile {
    entries: BTreeMap<String, IpAddr>,
}

impl HostsFile {
    /// The file named by `HETGEN_HOSTS_FILE`, or an empty table when unset.
    pub fn from_env() -> Result<HostsFile, EnvError> {
        match std::env::var_os(HOSTS_FILE_VAR) {
            Some(path) => HostsFile::read(Path::new(&path)),
            None => Ok(HostsFile::default()),
        }
    }

    /// Parse `/etc/hosts` syntax: `ADDRESS NAME...`, `#` comments.
    pub fn read(path: &Path) -> Result<HostsFile, EnvError> {
        let text = std::fs::read_to_string(path).map_err(|source| EnvError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut entries = BTreeMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            let Some(address) = words.next() else {
                continue;
            };
            let address: IpAddr = address.parse().map_err(|e| EnvError::Malformed {
                path: path.to_owned(),
                line: n + 1,
                column: 1,
                message: format!("`{address}` is not an IP address: {e}"),
            })?;
            for name in words {
                entries.insert(name.to_owned(), address);
            }
        }
        Ok(HostsFile { entries })
    }

    /// The address of `name`, if the file lists it.
    pub fn lookup(&self, name: &str) -> Option<IpAddr> {
        self.entries.get(name).copied()
    }
}
