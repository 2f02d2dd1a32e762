//! A host's processes end with it.
//!
//! On SageMaker a container ends with its entry point, taking everything it started along.
//! Outside a container two places keep that promise by hand, with these calls: `hetgen deploy
//! --local` runs each simulated host as a process group of its own and kills the group when its
//! leader exits, and the launcher runs a training script's `torchrun` in a group it passes
//! SIGTERM and SIGINT to. In both, the child dies with the process that started it
//! ([`die_with_parent`]), so nothing outlives a supervisor killed outright.

use rustix::process::Pid;
pub use rustix::process::Signal;

/// Ask the kernel to SIGKILL this process when the thread that started it dies
/// (`PR_SET_PDEATHSIG`). Meant for a child between fork and exec (`CommandExt::pre_exec`): it
/// is one system call, async-signal-safe.
#[cfg(target_os = "linux")]
pub fn die_with_parent() -> std::io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    Ok(())
}

/// Sends `signal` to the process group led by `leader` (`killpg`). A group that is gone already
/// is an error (`ESRCH`) the caller may ignore; a pid that names no single group (0, or beyond
/// the kernel's range) is refused without sending anything.
pub fn signal_group(leader: u32, signal: Signal) -> std::io::Result<()> {
    let pid = i32::try_from(leader)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{leader} is not a process group id"),
            )
        })?;
    rustix::process::kill_process_group(pid, signal)?;
    Ok(())
}

/// The usual name of signal number `signal` (`SIGKILL`), for messages; `signal` when it is not
/// one a host is usually stopped or killed by.
pub fn signal_name(signal: i32) -> &'static str {
    let Some(signal) = Signal::from_named_raw(signal) else {
        return "signal";
    };
    match signal {
        Signal::HUP => "SIGHUP",
        Signal::INT => "SIGINT",
        Signal::QUIT => "SIGQUIT",
        Signal::ILL => "SIGILL",
        Signal::ABORT => "SIGABRT",
        Signal::BUS => "SIGBUS",
        Signal::FPE => "SIGFPE",
        Signal::KILL => "SIGKILL",
        Signal::SEGV => "SIGSEGV",
        Signal::PIPE => "SIGPIPE",
        Signal::TERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::Command;

    use super::*;

    #[test]
    fn signals_are_named_as_people_know_them() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(2), "SIGINT");
        assert_eq!(signal_name(6), "SIGABRT");
        assert_eq!(signal_name(Signal::USR1.as_raw()), "signal");
        assert_eq!(signal_name(0), "signal");
        assert_eq!(signal_name(-1), "signal");
        assert_eq!(signal_name(1000), "signal");
    }

    #[test]
    fn a_group_is_signalled_whole_and_only_by_its_own_id() {
        // A leader whose child would outlive it: both go with the group.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        signal_group(child.id(), Signal::TERM).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(15));
        // Not a group id: refused before anything is sent (0 would be this process's own group).
        assert_eq!(
            signal_group(0, Signal::TERM).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
        assert!(signal_group(u32::MAX, Signal::TERM).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_child_is_set_to_die_with_its_parent() {
        let mut command = Command::new("true");
        // SAFETY: system calls only, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                die_with_parent()?;
                match rustix::process::parent_process_death_signal()? {
                    Some(Signal::KILL) => Ok(()),
                    // No allocation between fork and exec.
                    _ => Err(std::io::ErrorKind::Other.into()),
                }
            })
        };
        assert!(command.status().unwrap().success());
    }
}
