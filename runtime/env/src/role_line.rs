//! The launcher's `starting role` line, which it writes on every host once it knows the host's
//! group: `INFO starting role host="algo-1" group="dnn_group" role=Trainer job=digits`.
//!
//! The launcher logs it through `tracing` (the message, then the fields, string values in
//! quotes); `hetgen deploy --wait` and `hetgen logs` read the host's group back from it to label
//! the host's lines, on SageMaker as on a local run.

/// The line's message.
pub const STARTING_ROLE: &str = "starting role";

/// The group a `starting role` line names (its `group="…"` field), `None` for any other line.
pub fn starting_role_group(line: &str) -> Option<&str> {
    let (_, fields) = line.split_once(STARTING_ROLE)?;
    let (_, rest) = fields.split_once(" group=\"")?;
    rest.split_once('"').map(|(group, _)| group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_its_group() {
        let line = "2026-12-04T14:48:57Z  INFO starting role host=\"algo-1\" \
                    group=\"dnn_group\" role=Trainer job=d";
        assert_eq!(starting_role_group(line), Some("dnn_group"));
        assert_eq!(
            starting_role_group("starting role host=\"algo-2\" group=\"g\""),
            Some("g")
        );
        // Another line, or one whose group field is cut off.
        assert_eq!(starting_role_group("group=\"dnn_group\""), None);
        assert_eq!(starting_role_group("starting role host=\"algo-1\""), None);
        assert_eq!(starting_role_group("starting role group=\"dnn"), None);
    }
}
