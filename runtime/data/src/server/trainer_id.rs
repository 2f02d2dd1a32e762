//! Trainer ids: what a client may call itself.

use super::config::{MAX_RANK, MAX_TRAINER_ID, ServerConfig};
use super::refusal::Refusal;

/// Refuse trainer ids no hetgen trainer sends. Inside a job (`trainer_hosts` known) an id
/// names one of its trainer hosts and a rank of the job, `<host>/rank-<n>` with `n` below its
/// world size (when known), as every hetgen client sends it (or `<host>/launcher`, the
/// trainer host's launcher saying it finished): a caller cannot make up trainers to fill the
/// server's table or take shares of its memory budget.
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
                    r.parse::<u32>().is_ok_and(|n| {
                        n <= MAX_RANK
                            && config.world_size.is_none_or(|world| n < world)
                            && n.to_string() == r
                    })
                }))
    });
    if ours {
        Ok(())
    } else {
        Err(Refusal::NotOurTrainer {
            id: id.to_owned(),
            hosts: config.trainer_hosts.clone(),
            last_rank: config.world_size.map_or(MAX_RANK, |w| w.saturating_sub(1)),
        })
    }
}
