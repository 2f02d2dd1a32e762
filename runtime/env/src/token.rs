//! The job token: 32 random bytes from the operating system, hex-encoded. A fresh one is made
//! for every submission (`hetgen deploy`) and every local run (`hetgen deploy --local`) and
//! handed to every instance as `HETGEN_JOB_TOKEN`; the data service refuses calls without it.

/// A fresh job token: 64 hex digits.
pub fn job_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_long_hex_and_differ() {
        let (a, b) = (super::job_token().unwrap(), super::job_token().unwrap());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
