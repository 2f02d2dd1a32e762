//! The job token: 32 random bytes from the operating system, hex-encoded, generated for every
//! submission and handed to every instance through the job's Environment. The data service
//! refuses calls without it.

/// A fresh job token.
pub fn job_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_long_hex_and_differ() {
        let (a, b) = (super::job_token(), super::job_token());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
