#!/usr/bin/env bash
# How close `hetgen plan`'s arithmetic comes to a run, for a job on the user's own Dataset:
# `hetgen profile --trainer` measures both rates (the dataset in hetgen's workers, the script
# with its input replayed from memory), then `hetgen bench --profile` runs the job here
# homogeneous, remote-only and hybrid (the trainer host on one core, the data host on the
# other) and prints each run's predicted samples/s and stall beside the measured ones.
#   bench/sizing.sh [ROUNDS]
# Two jobs: the pytorch-dataset example with one trainer and one data host (so that the one
# trainer process has the core the profile timed it on), and a heavier dataset,
# bench/folder_dataset.py (PIL decode, RandomResizedCrop 224, flip) on the pipeline bench's
# JPEGs, trained by bench/sizing/train.py. Both sides run `make wheel`'s build of hetgen (the
# one the tests use): the comparison is of a prediction with a run of the same build.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
rounds="${1:-2}"
torch_venv="$(scripts/torch-env.sh)"
export PATH="$torch_venv/bin:$PATH"
make -s wheel >&2
cargo build -q -p hetgen --bin hetgen
hetgen="$CARGO_TARGET_DIR/debug/hetgen"
work="$CARGO_TARGET_DIR/bench-sizing"
rm -rf "$work" && mkdir -p "$work"

digits="$work/digits"
(cd "$work" && "$hetgen" new digits --example pytorch-dataset >/dev/null)
sed -i '0,/count = 2/s//count = 1/; 0,/count = 2/s//count = 1/' "$digits/hetgen.toml"
jpeg="$work/jpeg"
mkdir -p "$jpeg"
cp bench/sizing/hetgen.toml bench/sizing/train.py bench/folder_dataset.py bench/labelled_files.py "$jpeg/"
ln -s "$(jpeg_folder)" "$jpeg/images"

echo "| job | round | configuration | measured samples/s | predicted samples/s | measured stall | predicted stall |"
echo "|---|---|---|---|---|---|---|"
for round in $(seq 1 "$rounds"); do
  for job in "$digits" "$jpeg"; do
    (cd "$job" && "$hetgen" render >/dev/null &&
      "$hetgen" profile --trainer --threads 1 --seconds 10 --python "$torch_venv/bin/python" \
        --format json >/dev/null 2>&1 &&
      "$hetgen" bench --profile profile.json --format json 2>/dev/null) > "$job/bench-$round.json"
    python3 - "$job/bench-$round.json" "$(basename "$job")" "$round" <<'PY'
import json, sys
bench, name, round_ = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
for key in ("homogeneous", "heterogeneous", "hybrid"):
    c = bench[key]
    p = c.get("predicted") or {}
    print(f"| {name} | {round_} | {c['configuration']} | {c['samples_per_s']:.0f} | "
          f"{p.get('samples_per_s', float('nan')):.0f} | {100 * c['stall_fraction']:.1f} % | "
          f"{100 * p.get('stall_fraction', float('nan')):.1f} % |")
PY
  done
done
