//! The data service's port, one rule for every place that needs it: the data server listening,
//! a trainer's client connecting, and what is rendered or laid out around them (a pod's
//! `containerPort` and readiness probe, the local twin's loopback block).
//!
//! The port is `HETGEN_DATA_PORT` where the job sets it (a spec's `[kubernetes] environment`,
//! a process's environment), else [`DEFAULT_DATA_PORT`]: the same on every host, as each host
//! has an address of its own.

/// The variable that sets the data service's port.
pub const DATA_PORT_VAR: &str = "HETGEN_DATA_PORT";

/// The data service's port when nothing sets it.
pub const DEFAULT_DATA_PORT: u16 = 16000;

/// What a valid value of a port variable is, for its error.
pub const PORT_EXPECTED: &str = "a TCP port number from 1 to 65535";

/// `text` as a port ([`PORT_EXPECTED`]); surrounding blanks are allowed.
pub fn parse_port(text: &str) -> Option<u16> {
    text.trim().parse::<u16>().ok().filter(|port| *port > 0)
}

/// The data port that `variables` set: the first `HETGEN_DATA_PORT` among them (callers put
/// what wins first), else the default. A value that is not a port is the spec check's or the
/// server's to report; here it falls back to the default, as it never reaches a server that
/// would listen on it.
pub fn data_port_in<'a>(variables: impl IntoIterator<Item = (&'a str, &'a str)>) -> u16 {
    variables
        .into_iter()
        .find(|(name, _)| *name == DATA_PORT_VAR)
        .and_then(|(_, value)| parse_port(value))
        .unwrap_or(DEFAULT_DATA_PORT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_setting_wins_and_nonsense_is_no_port() {
        assert_eq!(data_port_in([]), DEFAULT_DATA_PORT);
        assert_eq!(
            data_port_in([
                ("A", "1"),
                (DATA_PORT_VAR, " 17000 "),
                (DATA_PORT_VAR, "18000")
            ]),
            17000
        );
        assert_eq!(parse_port("0"), None);
        assert_eq!(parse_port("65536"), None);
        assert_eq!(parse_port("http"), None);
        assert_eq!(parse_port("65535"), Some(65535));
    }
}
