//! "did you mean …?" for names the user mistyped.

/// The candidate closest to `given` by edit distance, if it is close enough to be a typo
/// (distance under 3, as just does) or differs only in case.
pub fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let lower = given.to_lowercase();
    candidates
        .into_iter()
        .filter(|c| *c != given)
        .map(|c| {
            let distance = if c.to_lowercase() == lower {
                0
            } else {
                strsim::levenshtein(given, c)
            };
            (distance, c)
        })
        .filter(|(distance, _)| *distance < 3)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn suggests_close_names_only() {
        let groups = ["data_group", "dnn_group"];
        assert_eq!(did_you_mean("data_grop", groups), Some("data_group"));
        assert_eq!(did_you_mean("DNN_GROUP", groups), Some("dnn_group"));
        assert_eq!(did_you_mean("trainers", groups), None);
        assert_eq!(
            did_you_mean("ml.c5.9xlarg", ["ml.c5.9xlarge", "ml.c5.xlarge"]),
            Some("ml.c5.9xlarge")
        );
    }
}
