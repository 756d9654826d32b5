#!/usr/bin/env bash
# How long Slurm's own squeue takes, in the forms the daemon could use, with the queue as it is now
# (run after `bench_schedd.py --slurm --keep-jobs`, inside `scripts/slurm-box env`): docs/schedd-scale.md.
set -uo pipefail
fmt='%i|%j|%u|%T|%r|%P|%N|%D|%V|%S|%Q|%b|%k|%l'
time_it() {
    local s e bytes
    s=$EPOCHREALTIME
    bytes=$("$@" 2>/dev/null | wc -c)
    e=$EPOCHREALTIME
    python3 -c 'import sys; print(f"{sys.argv[1]:<58} {float(sys.argv[3]) - float(sys.argv[2]):6.2f} s {int(sys.argv[4]):>11} bytes")' \
        "$*" "$s" "$e" "$bytes"
}
time_it squeue --json
time_it squeue --json --states=PENDING,RUNNING
time_it squeue -h -t PENDING,RUNNING -o "$fmt"
squeue --json >/tmp/squeue-variants.json
python3 -c 'import json, time; t = time.perf_counter(); d = json.load(open("/tmp/squeue-variants.json")); n = len(d["jobs"]); print(f"python json.load of squeue --json: {time.perf_counter() - t:.2f} s ({n} jobs)")'
rm -f /tmp/squeue-variants.json
