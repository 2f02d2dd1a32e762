//! The order of a job's hosts: every host of a group computes the same ranks from it, so it must
//! not depend on how the names were listed.

/// Sort key for host names in which runs of digits compare as numbers: `algo-2` before
/// `algo-10` (SageMaker's names), and `x-node-0-2.x` before `x-node-0-10.x` (JobSet's pod
/// names on Kubernetes, `<jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>`, whose
/// pod index is not the last part of the name).
pub fn host_order(host: &str) -> HostOrder {
    let mut pieces = Vec::new();
    let mut rest = host;
    while let Some(first) = rest.chars().next() {
        let digit = first.is_ascii_digit();
        let end = rest
            .find(|c: char| c.is_ascii_digit() != digit)
            .unwrap_or(rest.len());
        let (run, tail) = rest.split_at(end);
        pieces.push(if digit {
            // Compared by length without leading zeros, then digit by digit: any number of
            // digits orders correctly, with nothing to overflow.
            let value = run.trim_start_matches('0');
            Piece::Number {
                digits: value.len(),
                value: value.to_owned(),
            }
        } else {
            Piece::Text(run.to_owned())
        });
        rest = tail;
    }
    HostOrder {
        pieces,
        name: host.to_owned(),
    }
}

/// [`host_order`]'s key: the name's runs of digits and of other characters, then the name
/// itself, so that `algo-01` and `algo-1` still have one order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostOrder {
    pieces: Vec<Piece>,
    name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Piece {
    Number { digits: usize, value: String },
    Text(String),
}

#[cfg(test)]
mod tests {
    use super::host_order;

    fn sorted(mut hosts: Vec<&str>) -> Vec<&str> {
        hosts.sort_by_key(|h| host_order(h));
        hosts
    }

    #[test]
    fn sagemaker_hosts_sort_by_their_number() {
        assert_eq!(
            sorted(vec!["algo-10", "algo-2", "algo-1"]),
            ["algo-1", "algo-2", "algo-10"]
        );
    }

    #[test]
    fn pods_sort_by_their_index_inside_the_name() {
        // The pod index is followed by the subdomain: a trailing number alone would not see it.
        assert_eq!(
            sorted(vec![
                "x-node-0-10.x",
                "x-node-0-2.x",
                "x-node-0-0.x",
                "x-node-0-1.x"
            ]),
            [
                "x-node-0-0.x",
                "x-node-0-1.x",
                "x-node-0-2.x",
                "x-node-0-10.x"
            ]
        );
        // Numbers longer than any integer type still compare as numbers.
        assert_eq!(
            sorted(vec![
                "h-100000000000000000000000",
                "h-99999999999999999999999"
            ]),
            ["h-99999999999999999999999", "h-100000000000000000000000"]
        );
        // Leading zeros do not make two names one.
        assert_eq!(sorted(vec!["algo-1", "algo-01"]), ["algo-01", "algo-1"]);
    }
}
