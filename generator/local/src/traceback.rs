//! How a host's output shows that its script raised: the one rule `deploy --local` and
//! `deploy --wait` use to tell which host's script failed first.

/// The first line Python writes for an exception that ends a program.
const TRACEBACK: &str = "Traceback (most recent call last):";

/// A line of a script as the script wrote it: without the `[rankN]:` prefix torchrun may put
/// before a worker's lines.
pub fn script_line(line: &str) -> &str {
    match line.split_once("]:") {
        Some((rank, rest)) if rank.starts_with("[rank") => rest,
        _ => line,
    }
}

/// Whether `line` of a host's output begins a Python traceback: its script raised.
pub fn starts_traceback(line: &str) -> bool {
    script_line(line).trim_start().starts_with(TRACEBACK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceback_begins_with_or_without_torchrun_s_prefix() {
        assert!(starts_traceback("Traceback (most recent call last):"));
        assert!(starts_traceback(
            "[rank1]:Traceback (most recent call last):"
        ));
        assert!(!starts_traceback("RuntimeError: boom"));
        assert_eq!(script_line("[rank0]:  File \"t.py\""), "  File \"t.py\"");
        assert_eq!(script_line("[x]: y"), "[x]: y");
    }
}
