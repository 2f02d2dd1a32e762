//! Trainer ids: what a client may call itself, and how an id is shown in logs and messages.

use super::config::{MAX_RANK, MAX_TRAINER_ID, ServerConfig};
use super::refusal::Refusal;

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

/// Refuse trainer ids no hetgen trainer sends. Inside a job (`trainer_hosts` known) an id
/// names one of its trainer hosts and a rank, `<host>/rank-<n>`, as every hetgen client
/// sends it (or `<host>/launcher`, the trainer host's launcher saying it finished): a caller
/// cannot make up trainers to fill the server's table.
pub(crate) fn check_trainer_id(id: &str, config: &ServerConfig) -> Result<(), Refusal> {
    if id.len() > MAX_TRAINER_ID {
        return Err(Refusal::TrainerIdTooLong(id.to_owned()));
    }
    if config.trainer_hosts.is_empty() {
        return Ok(());
    }
    let ours = id.rsplit_once('/').is_some_and(|(host, who)| {
        let rank = who.strip_prefix("rank-");
        config.is_trainer_host(host)
            && (who == "launcher"
                || rank.is_some_and(|r| {
                    // Written as a client writes it, so that one rank is one id: `rank-01`
                    // and `rank-+1` would be a second trainer for rank 1.
                    r.parse::<u32>()
                        .is_ok_and(|n| n <= MAX_RANK && n.to_string() == r)
                }))
    });
    if ours {
        Ok(())
    } else {
        Err(Refusal::NotOurTrainer {
            id: id.to_owned(),
            hosts: config.trainer_hosts.clone(),
        })
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
