//! Issue #49: when a job fails, its reason names the host that failed on its own and keeps
//! what the user needs from it. Shell scripts stand in for the launcher, as in `supervise`.

use std::time::Duration;

use hetgen_local::{Limits, Status, StopRequests};

use crate::{Seen, TINY, assert_status, job, launcher_options, prepare};

fn limits() -> Limits {
    Limits {
        max_runtime: Some(Duration::from_secs(20)),
        grace: Duration::from_secs(5),
    }
}

#[test]
fn a_data_host_that_fails_at_start_is_the_reason_not_the_trainer_its_stop_ended() {
    // The data hosts fail at start, without a traceback (hetgen's launcher reports a dataset's
    // bad field in one line). The trainer's torchrun, stopped by the job, prints a traceback
    // of its own (`SignalException: got signal: 15`) and exits 1 with a failure file: a
    // traceback, but the stop's, not a failure of its own.
    let body = r#"
job="$SAGEMAKER_BASE_DIR/../.."
if [ "$SM_CURRENT_INSTANCE_GROUP" = dnn_group ]; then
  trap 'echo "Traceback (most recent call last):" >&2
        echo "SignalException: Process 46 got signal: 15" >&2
        echo "SignalException: Process 46 got signal: 15" > "$SAGEMAKER_BASE_DIR/output/failure"
        exit 1' TERM
  touch "$job/trainer-ready"
  while :; do sleep 0.05; done
fi
while [ ! -e "$job/trainer-ready" ]; do sleep 0.05; done
echo "launcher: error: field \`1\` is a str" >&2
echo "field \`1\` is a str" > "$SAGEMAKER_BASE_DIR/output/failure"
exit 1
"#;
    let (_dir, mut opts) = launcher_options(body);
    opts.limits = limits();
    let local = prepare(&job(TINY), opts);
    let mut seen = Seen::default();
    let record = local.run(&StopRequests::new(), &mut seen).unwrap();
    assert_status(&record, Status::Failed, &seen);
    let trainer = record
        .hosts
        .iter()
        .find(|h| h.host.group == "dnn_group")
        .unwrap();
    // The trainer did print its traceback and fail, after the stop began.
    assert_eq!(trainer.exit_code, Some(1), "{}", seen.transcript());
    assert!(seen.transcript().contains("SignalException"));
    let reason = record.failure_reason.as_deref().unwrap();
    assert!(
        reason.starts_with("AlgorithmError: field `1` is a str (algo-")
            && reason.ends_with(" in data_group, exit code 1)"),
        "{reason}"
    );
    // What the run said when it stopped the job is the job's reason.
    assert_eq!(seen.stopping, [reason]);
}
