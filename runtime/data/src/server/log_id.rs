//! How text a peer chose (a trainer id, a reason, a host name) is shown in logs and messages.

/// A trainer id as logs and messages show it: escaped (no control or bidirectional characters
/// reach a terminal) and cut to 64 characters.
pub struct LogId<'a>(pub &'a str);

impl std::fmt::Display for LogId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 64;
        for c in self.0.chars().take(SHOWN) {
            if c.is_ascii_graphic() || c == ' ' {
                write!(f, "{c}")?;
            } else {
                write!(f, "{}", c.escape_unicode())?;
            }
        }
        let total = self.0.chars().count();
        if total > SHOWN {
            write!(f, "… ({total} characters)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::LogId;

    #[test]
    fn trainer_ids_in_logs_are_escaped_and_cut_short() {
        assert_eq!(LogId("algo-2/rank-0").to_string(), "algo-2/rank-0");
        assert_eq!(
            LogId("evil\u{202e}\n\u{1b}[2J").to_string(),
            "evil\\u{202e}\\u{a}\\u{1b}[2J"
        );
        let long = "x".repeat(100_000);
        assert_eq!(
            LogId(&long).to_string(),
            format!("{}… (100000 characters)", "x".repeat(64))
        );
    }
}
