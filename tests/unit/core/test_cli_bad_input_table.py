"""Every command x every class of bad input: one line `easlurm: error: ...` naming the file, field or option,
exit status 2, no traceback, and nothing written half-way.

The classes: undecodable files (config, plan, params, measurements, traces, YAML inputs), corrupt `.gz`,
unwritable outputs, integers too large, and values that are out of range and must be refused rather than
accepted (flags and configuration keys alike). Only argument validation of commands that need Slurm or a GPU.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from easlurm.cli import main

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "tests" / "fixtures" / "traces" / "minimal.csv"
PLAN = ROOT / "campaigns" / "demo.yaml"
MEASUREMENTS = ROOT / "data" / "oracle" / "h100_sxm_training_steps.csv"
HUGE = "99999999999999999999"
#: bytes that are not UTF-8 (and not YAML, CSV or JSON either)
BINARY = b"\xff\xfe\x00\x81\x9c\xa0binary\x00\xc3\x28\n" * 8


@dataclass(frozen=True)
class Case:
    """argv (with {bin}, {gz}, {trunc}, {unw}, {tmp}, {cfg} placeholders), the text the line must name."""

    argv: tuple[str, ...]
    names: str
    config: str | None = None  # YAML written to {cfg}


def C(names: str, *argv: str, config: str | None = None) -> Case:
    return Case(tuple(argv), names, config)


T, P, M = str(TRACE), str(PLAN), str(MEASUREMENTS)
#: an SWF log that says nothing of GPUs (processors only): refused without --procs-per-gpu or --cluster
SWF = str(ROOT / "tests" / "fixtures" / "traces" / "public" / "swf_unknown_wait.swf")
OUT = "{tmp}/out"

#: id -> case; the id reads "class-command".
CASES: dict[str, Case] = {
    # --- undecodable configuration (-c) in every command
    **{
        f"config-undecodable-{'-'.join(cmd[:2])}": C("{bin}", "-c", "{bin}", *cmd)
        for cmd in (
            ("config",),
            ("profile", "--", "true"),
            ("sim", "run", "--policy", "zeus"),
            ("sim", "replay", T, "--out", OUT),
            ("sim", "campaign", P, "--out", OUT, "--dry-run"),
            ("sim", "report", "{tmp}"),
            ("schedd", "--once", "--dry-run"),
            ("predict", "--model", "resnet50"),
            ("model", "list"),
            ("model", "corun", "resnet50:32", "bert-base:16"),
            ("model", "calibrate", M, "--out", "{tmp}/p.yaml"),
            ("model", "calibrate-pairs", "{bin}", "--out", "{tmp}/p.yaml"),
            ("model", "evaluate", M),
            ("model", "measure", "--model", "resnet50"),
            ("sacct", "-j", "1"),
            ("accounting", "republish", "--dry-run"),
        )
    },
    # --- undecodable input files
    "plan-undecodable-campaign": C("{bin}", "sim", "campaign", "{bin}", "--out", OUT),
    "trace-undecodable-replay": C("{bin}", "sim", "replay", "{bin}", "--out", OUT),
    "trace-undecodable-csv-replay": C("{bin}", "sim", "replay", "{bin}", "--format", "csv", "--out", OUT),
    "trace-undecodable-swf-replay": C("{bin}", "sim", "replay", "{bin}", "--format", "swf", "--out", OUT),
    "trace-undecodable-sacct-replay": C("{bin}", "sim", "replay", "{bin}", "--format", "sacct", "--out", OUT),
    "trace-undecodable-sacct-json-replay": C(
        "{bin}", "sim", "replay", "{bin}", "--format", "sacct-json", "--out", OUT
    ),
    "cluster-undecodable-replay": C("{bin}", "sim", "replay", T, "--cluster", "{bin}", "--out", OUT),
    "cluster-undecodable-run": C("{bin}", "sim", "run", "--policy", "zeus", "--cluster", "{bin}"),
    "joblist-undecodable-run": C("{bin}", "sim", "run", "--policy", "zeus", "--job-list", "{bin}"),
    "hardware-undecodable-run": C("{bin}", "sim", "run", "--policy", "zeus", "--hardware", "{bin}"),
    "hardware-undecodable-list": C("{bin}", "model", "list", "--hardware", "{bin}"),
    "hardware-undecodable-predict": C("{bin}", "predict", "--model", "resnet50", "--hardware", "{bin}"),
    "hardware-undecodable-schedd": C("{bin}", "schedd", "--once", "--dry-run", "--hardware", "{bin}"),
    "hardware-undecodable-replay": C("{bin}", "sim", "replay", T, "--hardware", "{bin}", "--out", OUT),
    "hardware-undecodable-campaign": C(
        "{bin}", "sim", "campaign", P, "--hardware", "{bin}", "--out", OUT, "--dry-run"
    ),
    "workload-undecodable-predict": C("{bin}", "predict", "--workload", "{bin}"),
    "params-undecodable-predict": C("{bin}", "predict", "--model", "resnet50", "--params", "{bin}"),
    "params-undecodable-corun": C(
        "{bin}", "model", "corun", "resnet50:32", "bert-base:16", "--params", "{bin}"
    ),
    "params-undecodable-calibrate": C(
        "{bin}", "model", "calibrate", M, "--params", "{bin}", "--out", "{tmp}/p.yaml"
    ),
    "params-undecodable-evaluate": C("{bin}", "model", "evaluate", M, "--params", "{bin}"),
    "params-undecodable-calibrate-pairs": C(
        "{bin}", "model", "calibrate-pairs", "{bin}", "--params", "{bin}", "--out", "{tmp}/p.yaml"
    ),
    "measurements-undecodable-calibrate": C("{bin}", "model", "calibrate", "{bin}", "--out", "{tmp}/p.yaml"),
    "measurements-undecodable-evaluate": C("{bin}", "model", "evaluate", "{bin}"),
    "measurements-undecodable-calibrate-pairs": C(
        "{bin}", "model", "calibrate-pairs", "{bin}", "--out", "{tmp}/p.yaml"
    ),
    # --- corrupt .gz
    "gz-corrupt-replay": C("{gz}", "sim", "replay", "{gz}", "--out", OUT),
    "gz-truncated-replay": C("{trunc}", "sim", "replay", "{trunc}", "--out", OUT),
    "gz-truncated-skip-bad-replay": C("{trunc}", "sim", "replay", "{trunc}", "--skip-bad", "--out", OUT),
    # --- unwritable outputs
    "unwritable-out-replay": C("--out", "sim", "replay", T, "--out", "{unw}"),
    "unwritable-out-campaign": C("--out", "sim", "campaign", P, "--out", "{unw}"),
    "unwritable-out-calibrate": C("--out", "model", "calibrate", M, "--out", "{unw}/p.yaml"),
    "unwritable-out-calibrate-pairs": C(
        "--out", "model", "calibrate-pairs", "{pairs}", "--out", "{unw}/p.yaml"
    ),
    "unwritable-out-evaluate": C("--out", "model", "evaluate", M, "--out", "{unw}"),
    "unwritable-out-measure": C("--out", "model", "measure", "--model", "resnet50", "--out", "{unw}/m.csv"),
    "unwritable-out-profile": C("--out", "profile", "--out", "{unw}", "--", "true"),
    "unwritable-output-profile": C("--output", "profile", "--output", "{unw}/s.txt", "--", "true"),
    "unwritable-decision-log-schedd": C(
        "--decision-log", "schedd", "--once", "--dry-run", "--decision-log", "{unw}/d.jsonl"
    ),
    "file-for-dir-out-replay": C("--out", "sim", "replay", T, "--out", "{blocker}"),
    "file-for-dir-out-campaign": C("--out", "sim", "campaign", P, "--out", "{blocker}"),
    "file-for-dir-out-evaluate": C("--out", "model", "evaluate", M, "--out", "{blocker}"),
    "file-for-dir-out-profile": C("--out", "profile", "--out", "{blocker}", "--", "true"),
    "file-for-dir-report": C("RESULTS_DIR", "sim", "report", "{blocker}"),
    "dir-for-file-out-calibrate": C("--out", "model", "calibrate", M, "--out", "{tmp}"),
    "dir-for-file-out-calibrate-pairs": C("--out", "model", "calibrate-pairs", "{pairs}", "--out", "{tmp}"),
    "dir-for-file-out-measure": C("--out", "model", "measure", "--model", "resnet50", "--out", "{tmp}"),
    "dir-for-file-output-profile": C("--output", "profile", "--output", "{tmp}", "--", "true"),
    "dir-for-file-decision-log-schedd": C(
        "--decision-log", "schedd", "--once", "--dry-run", "--decision-log", "{tmp}"
    ),
    # --- integers too large
    "huge-batch-predict": C("--batch", "predict", "--model", "resnet50", "--batch", HUGE),
    "huge-gpus-predict": C("--gpus", "predict", "--model", "resnet50", "--gpus", HUGE),
    "huge-seq-len-predict": C("--seq-len", "predict", "--model", "bert-base", "--seq-len", HUGE),
    "huge-image-size-predict": C("--image-size", "predict", "--model", "resnet50", "--image-size", HUGE),
    "huge-seed-run": C("--seed", "sim", "run", "--policy", "zeus", "--seed", HUGE),
    "huge-seed-replay": C("--seed", "sim", "replay", T, "--seed", HUGE, "--out", OUT),
    "huge-seeds-replay": C("--seeds", "sim", "replay", T, "--seeds", HUGE, "--out", OUT),
    "huge-max-jobs-replay": C("--max-jobs", "sim", "replay", T, "--max-jobs", HUGE, "--out", OUT),
    "huge-procs-per-gpu-replay": C(
        "--procs-per-gpu", "sim", "replay", T, "--procs-per-gpu", HUGE, "--out", OUT
    ),
    "huge-jobs-campaign": C("--jobs", "sim", "campaign", P, "--jobs", HUGE, "--out", OUT),
    "huge-bootstrap-report": C("--bootstrap", "sim", "report", "{tmp}", "--bootstrap", HUGE),
    "huge-maxiter-calibrate": C(
        "--maxiter", "model", "calibrate", M, "--maxiter", HUGE, "--out", "{tmp}/p.yaml"
    ),
    "huge-popsize-evaluate": C("--popsize", "model", "evaluate", M, "--refit", "--popsize", HUGE),
    "huge-folds-calibrate": C("--folds", "model", "calibrate", M, "--folds", HUGE, "--out", "{tmp}/p.yaml"),
    "huge-batch-measure": C("--batch", "model", "measure", "--model", "resnet50", "--batch", HUGE),
    "huge-sweeps-measure": C("--sweeps", "model", "measure", "--model", "resnet50", "--sweeps", HUGE),
    "huge-metrics-port-schedd": C("--metrics-port", "schedd", "--once", "--dry-run", "--metrics-port", HUGE),
    "huge-batch-corun": C("FIRST", "model", "corun", f"resnet50:{HUGE}", "bert-base:16"),
    "huge-pair-batch-measure": C("--pairs", "model", "measure", "--pairs", f"resnet50:{HUGE}+bert-base:1"),
    "huge-only-index-campaign": C(
        "--only-index", "sim", "campaign", P, "--only-index", f"0-{HUGE}", "--out", OUT
    ),
    "huge-job-id-republish": C("--jobs", "accounting", "republish", "--jobs", HUGE, "--spool", "{tmp}"),
    "huge-hours-run": C("--hours", "sim", "run", "--policy", "zeus", "--hours", "1e300"),
    "huge-load-run": C("--load", "sim", "run", "--policy", "zeus", "--load", "1e300"),
    "huge-seeds-plan-campaign": C(
        "seeds", "sim", "campaign", "{plan}", "--out", OUT, config="seeds: " + HUGE
    ),
    "huge-job-steps-run": C(
        "steps",
        "sim",
        "run",
        "--policy",
        "zeus",
        "--job-list",
        "{cfg}",
        config=("jobs:\n  - {model: resnet50, batch: 32, steps: " + HUGE + "}\n"),
    ),
    # --- values that must be refused, as flags and as configuration keys
    "unknown-store-republish": C(
        "spank.store",
        "-c",
        "{cfg}",
        "accounting",
        "republish",
        "--spool",
        "{tmp}",
        config="spank:\n  store: db\n",
    ),
    "negative-noise-run": C("--noise-sigma", "sim", "run", "--policy", "zeus", "--noise-sigma", "-1"),
    "negative-noise-replay": C("--noise-sigma", "sim", "replay", T, "--noise-sigma", "-1", "--out", OUT),
    "negative-max-jobs-replay": C("--max-jobs", "sim", "replay", T, "--max-jobs", "-3", "--out", OUT),
    "swf-without-gpus-replay": C("--procs-per-gpu", "sim", "replay", SWF, "--out", OUT),
    "negative-procs-per-gpu-replay": C(
        "--procs-per-gpu", "sim", "replay", T, "--procs-per-gpu", "0", "--out", OUT
    ),
    "negative-hours-run": C("--hours", "sim", "run", "--policy", "zeus", "--hours", "-2"),
    "negative-load-run": C("--load", "sim", "run", "--policy", "zeus", "--load", "-2"),
    "nan-noise-run": C("--noise-sigma", "sim", "run", "--policy", "zeus", "--noise-sigma", "nan"),
    "negative-budget-run": C("--power-budget", "sim", "run", "--policy", "zeus", "--power-budget", "-5W"),
    "interval-huge-profile": C("--interval", "profile", "--interval", "1e9", "--", "true"),
    "interval-zero-profile": C("--interval", "profile", "--interval", "0", "--", "true"),
    "interval-zero-schedd": C("--interval", "schedd", "--once", "--dry-run", "--interval", "0"),
    "negative-seq-len-predict": C("--seq-len", "predict", "--model", "bert-base", "--seq-len", "-4"),
    "negative-maxiter-calibrate": C(
        "--maxiter", "model", "calibrate", M, "--maxiter", "-1", "--out", "{tmp}/p.yaml"
    ),
    "negative-folds-calibrate": C(
        "--folds", "model", "calibrate", M, "--folds", "-1", "--out", "{tmp}/p.yaml"
    ),
    "negative-sweeps-measure": C("--sweeps", "model", "measure", "--model", "resnet50", "--sweeps", "0"),
    "huge-gpus-measure": C("--gpus", "model", "measure", "--model", "resnet50", "--gpus", HUGE),
    "zero-gpus-measure": C("--gpus", "model", "measure", "--model", "resnet50", "--gpus", "0,2"),
    "uneven-gpus-nodes-measure": C(
        "--gpus", "model", "measure", "--model", "resnet50", "--gpus", "3", "--nodes", "2", "--slurm"
    ),
    "uneven-batch-gpus-measure": C(
        "--batch", "model", "measure", "--model", "resnet50", "--batch", "6", "--gpus", "4"
    ),
    "nodes-without-slurm-measure": C("--nodes", "model", "measure", "--model", "resnet50", "--nodes", "2"),
    "huge-nodes-measure": C("--nodes", "model", "measure", "--model", "resnet50", "--nodes", HUGE, "--slurm"),
    "negative-seeds-replay": C("--seeds", "sim", "replay", T, "--seeds", "0", "--out", OUT),
    "negative-max-slowdown-replay": C(
        "--max-slowdown", "sim", "replay", T, "--max-slowdown", "-0.1", "--out", OUT
    ),
    "cfg-max-slowdown-replay": C(
        "sched.max_slowdown",
        "-c",
        "{cfg}",
        "sim",
        "replay",
        T,
        "--out",
        OUT,
        config="sched:\n  max_slowdown: -1\n",
    ),
    "cfg-max-slowdown-schedd": C(
        "sched.max_slowdown",
        "-c",
        "{cfg}",
        "schedd",
        "--once",
        "--dry-run",
        config="sched:\n  max_slowdown: 11\n",
    ),
    "unknown-model-joblist-run": C("{joblist}", "sim", "run", "--policy", "zeus", "--job-list", "{joblist}"),
    "cfg-budget-run": C(
        "sched.power_budget_w",
        "-c",
        "{cfg}",
        "sim",
        "run",
        "--policy",
        "zeus",
        config="sched:\n  power_budget_w: -5\n",
    ),
    "cfg-budget-schedd": C(
        "sched.power_budget_w",
        "-c",
        "{cfg}",
        "schedd",
        "--once",
        "--dry-run",
        config="sched:\n  power_budget_w: -5\n",
    ),
    "cfg-noise-run": C(
        "sim.noise_sigma", "-c", "{cfg}", "sim", "run", "--policy", "zeus", config="sim:\n  noise_sigma: -1\n"
    ),
    "cfg-noise-replay": C(
        "sim.noise_sigma", "-c", "{cfg}", "sim", "replay", T, "--out", OUT, config="sim:\n  noise_sigma: -1\n"
    ),
    "cfg-hours-run": C(
        "sim.hours", "-c", "{cfg}", "sim", "run", "--policy", "zeus", config="sim:\n  hours: 0\n"
    ),
    "cfg-interval-profile": C(
        "profiler.interval_s",
        "-c",
        "{cfg}",
        "profile",
        "--",
        "true",
        config="profiler:\n  interval_s: 1.0e+9\n",
    ),
    "cfg-interval-schedd": C(
        "sched.interval_s",
        "-c",
        "{cfg}",
        "schedd",
        "--once",
        "--dry-run",
        config="sched:\n  interval_s: -1\n",
    ),
    "cfg-cache-size-predict": C(
        "oracle.cache_size",
        "-c",
        "{cfg}",
        "predict",
        "--model",
        "resnet50",
        config="oracle:\n  cache_size: -1\n",
    ),
    "cfg-metrics-port-schedd": C(
        "sched.metrics_port",
        "-c",
        "{cfg}",
        "schedd",
        "--once",
        "--dry-run",
        config="sched:\n  metrics_port: 99999999999999999999\n",
    ),
    "cfg-checkpoint-run": C(
        "sim.checkpoint_interval_s",
        "-c",
        "{cfg}",
        "sim",
        "run",
        "--policy",
        "zeus",
        config="sim:\n  checkpoint_interval_s: -5\n",
    ),
    "zero-checkpoint-run": C(
        "--checkpoint-interval", "sim", "run", "--policy", "zeus", "--checkpoint-interval", "0"
    ),
    "plan-noise-campaign": C(
        "noise_sigma", "sim", "campaign", "{plan}", "--out", OUT, config="noise_sigma: -1"
    ),
    "plan-hours-campaign": C("hours", "sim", "campaign", "{plan}", "--out", OUT, config="hours: 1.0e+300"),
    "plan-budget-campaign": C(
        "power_budget_w", "sim", "campaign", "{plan}", "--out", OUT, config="power_budget_w: -5W"
    ),
    "empty-columns-replay": C("--columns", "sim", "replay", T, "--columns", "", "--out", OUT),
    "cfg-timeout-config": C("spank.timeout_ms", "-c", "{cfg}", "config", config="spank:\n  timeout_ms: -5\n"),
    "cfg-base-port-config": C(
        "box.base_port", "-c", "{cfg}", "config", config="box:\n  base_port: 99999999999999999999\n"
    ),
    # --- Slurm's power saving (docs/power-saving.md): settings, the programs and the node report
    "cfg-suspend-time-config": C(
        "box.suspend_time_s", "-c", "{cfg}", "config", config="box:\n  suspend_time_s: 0\n"
    ),
    "cfg-node-idle-power-report": C(
        "power.node_idle_w", "-c", "{cfg}", "power", "report", config="power:\n  node_idle_w: -5\n"
    ),
    "cfg-node-off-above-idle-power-report": C(
        "power.node_off_w",
        "-c",
        "{cfg}",
        "power",
        "report",
        config="power:\n  state_log: none.jsonl\n  node_idle_w: 100\n  node_off_w: 200\n",
    ),
    "cfg-suspend-command-power-suspend": C(
        "power.suspend_command",
        "-c",
        "{cfg}",
        "power",
        "suspend",
        "h100-1",
        config="power:\n  suspend_command: ipmitool chassis power off\n",
    ),
    "cfg-resume-command-field-power-resume": C(
        "power.resume_command",
        "-c",
        "{cfg}",
        "power",
        "resume",
        "h100-1",
        config="power:\n  resume_command: wake {host}\n",
    ),
    "cfg-state-log-power-suspend": C(
        "power.state_log", "-c", "{cfg}", "power", "suspend", "h100-1", config="power:\n  state_log: [a]\n"
    ),
    "starttime-power-report": C("-S/--starttime", "power", "report", "-S", "yesterday"),
    "by-node-jobs-report": C("-u", "report", "--by", "node", "-u", "root"),
    # --- idle allocated GPUs and per-job metrics (docs/metrics.md): the node agents' settings, the server
    "cfg-idle-util-metrics-show": C(
        "idle.gpu_util_pct", "-c", "{cfg}", "metrics", "show", config="idle:\n  gpu_util_pct: -1\n"
    ),
    "cfg-idle-after-config": C("idle.after_s", "-c", "{cfg}", "config", config="idle:\n  after_s: 0\n"),
    "cfg-idle-action-config": C("idle.action", "-c", "{cfg}", "config", config="idle:\n  action: ''\n"),
    "cfg-metrics-interval-config": C(
        "metrics.interval_s", "-c", "{cfg}", "config", config="metrics:\n  interval_s: 0\n"
    ),
    "cfg-metrics-dir-metrics-show": C(
        "metrics.dir", "-c", "{cfg}", "metrics", "show", config="metrics:\n  dir: [a]\n"
    ),
    "missing-dir-metrics-serve": C("--dir", "metrics", "serve", "--dir", "{tmp}/none"),
    # --- rule "a mapping where a mapping is expected" (easlurm.inputs.mapping): lists, strings, integers
    "not-mapping-params-predict": C(
        "top level must be a mapping", "predict", "--model", "resnet50", "--params", "{list}"
    ),
    "not-mapping-params-section-predict": C(
        "section 'params'", "predict", "--model", "resnet50", "--params", "{paramslist}"
    ),
    "not-mapping-plan-campaign": C(
        "top level must be a mapping", "sim", "campaign", "{int}", "--out", OUT, "--dry-run"
    ),
    "not-mapping-cluster-run": C(
        "top level must be a mapping", "sim", "run", "--policy", "zeus", "--cluster", "{str}"
    ),
    # --- rule "YAML nested at most 50 deep" (a RecursionError traceback before)
    "deep-yaml-workload-predict": C("nested deeper than 50", "predict", "--workload", "{deep}"),
    # --- rule "no duplicate YAML keys" (the last one silently won)
    "duplicate-key-config": C("duplicate key 'interval_s'", "-c", "{dupkey}", "config"),
    "duplicate-key-hardware-predict": C(
        "duplicate key 'h100'", "predict", "--model", "resnet50", "--hardware", "{duphw}"
    ),
    # --- rule "aliases expand to at most 10,000 nodes" (an anchor bomb was accepted)
    "anchor-bomb-plan-campaign": C("anchor bomb", "sim", "campaign", "{bomb}", "--out", OUT, "--dry-run"),
    # --- rule "numbers in a CSV cell are bounded" (1e30 was an OverflowError traceback)
    "overflow-cell-evaluate": C("batch must be at most", "model", "evaluate", "{m30}"),
    # --- rule "trace fields finite" (NaN in an SWF field was a traceback)
    "nan-swf-replay": C("submit_time", "sim", "replay", "{nanswf}", "--out", OUT),
    # --- rule "work sized before it starts" (a 10^9-GPU job, a 10^11-node cluster: MemoryError)
    "huge-job-swf-replay": C("field gpus", "sim", "replay", "{hugeswf}", "--out", OUT),
    "huge-count-cluster-run": C(
        "nodes[0].count", "sim", "run", "--policy", "zeus", "--cluster", "{bigcluster}"
    ),
    "inf-load-plan-campaign": C(
        "loads_jobs_per_h", "sim", "campaign", "{infload}", "--out", OUT, "--dry-run"
    ),
    "huge-jobs-plan-campaign": C(
        "the jobs the plan's runs submit", "sim", "campaign", "{bigplan}", "--out", OUT, "--dry-run"
    ),
    # --- rule "outputs are tried, /proc refused up front" (the work ran, then the write failed)
    "proc-output-profile": C(
        "/proc", "profile", "--output", "/proc/easlurm-x.txt", "--", "touch", "{tmp}/ran"
    ),
    # --- rule "times are >= 0, before 2200, finite; energies finite" (accepted with exit 0)
    "negative-time-csv-replay": C("field submit", "sim", "replay", "{negsub}", "--out", OUT),
    "year-9999-csv-replay": C("before the year 2200", "sim", "replay", "{y9999}", "--out", OUT),
    "nan-energy-csv-replay": C("field energy_j", "sim", "replay", "{nanenergy}", "--out", OUT),
    # --- rule "parameters and hardware figures have a physical sign" (negative power, NaN step times)
    "negative-c-p-params-predict": C("params.c_p", "predict", "--model", "resnet50", "--params", "{negcp}"),
    "zero-figure-hardware-predict": C("bf16_tflops", "predict", "--model", "resnet50", "--hardware", "{hw0}"),
    "inf-figure-hardware-predict": C("hbm_gbs", "predict", "--model", "resnet50", "--hardware", "{hwinf}"),
    # --- rule "integers are integral, counts >= 1, names known" (truncated, dropped or only warned)
    "fractional-gpus-cluster-run": C("nodes[0].gpus", "sim", "run", "--policy", "zeus", "--cluster", "{c25}"),
    "negative-count-cluster-run": C(
        "nodes[0].count", "sim", "run", "--policy", "zeus", "--cluster", "{cneg}"
    ),
    "unknown-precision-joblist-run": C(
        "jobs[0].precision", "sim", "run", "--policy", "zeus", "--job-list", "{prec}"
    ),
    "unknown-shard-predict": C("--shard", "predict", "--model", "resnet50", "--shard", "zero9"),
    "unknown-ckpt-predict": C(
        "--activation-checkpointing", "predict", "--model", "resnet50", "--activation-checkpointing", "half"
    ),
    "unknown-precision-evaluate": C("precision: unknown precision 'fp64'", "model", "evaluate", "{mprec}"),
    "unknown-sharding-evaluate": C("sharding: unknown sharding 'zero9'", "model", "evaluate", "{mshard}"),
    # --- rule "no duplicate CSV headers, no copied rows" (the last column won; 0.0 % error on copies)
    "duplicate-header-csv-replay": C("duplicate column 'gpus'", "sim", "replay", "{duphdr}", "--out", OUT),
    "duplicate-column-evaluate": C("duplicate column 'model'", "model", "evaluate", "{mdup}"),
    "identical-rows-calibrate": C(
        "the same row as line 2", "model", "calibrate", "{ident}", "--maxiter", "1", "--out", "{tmp}/p.yaml"
    ),
    # --- rule "a plan's policy params are checked with the plan" (it failed mid-run, leaving output)
    "unknown-policy-param-campaign": C(
        "no_such_knob", "sim", "campaign", "{badparam}", "--out", OUT, "--no-report"
    ),
}

_HEAD = "; ProcsPerGPU: 1\n"
_SWF_ROW = "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 1 -1 -1\n"
_M_HEADER = "model,batch,precision,n_gpus,gpu,step_time_s\n"
_M_ROW = "resnet50,64,bf16,1,h100-sxm,0.12\n"
_PLAN = "name: p\nhours: 1\nseeds: 1\nexperiments:\n  - {name: e, scenarios: [B], policies: [zeus]"
#: the bad files the classes above need, written only for the cases that name them
EXTRA: dict[str, str] = {
    "list": "- a\n- b\n",
    "str": "'just a string'\n",
    "int": "42\n",
    "paramslist": "schema_version: 1\nparams: [1, 2]\n",
    "negcp": "schema_version: 1\nparams:\n  c_p: -1.0\n",
    "deep": "layers: " + "[" * 200 + "]" * 200 + "\n",
    "dupkey": "sched:\n  interval_s: 5\n  interval_s: 50\n",
    "duphw": "gpus:\n  h100: {tdp_w: 700}\n  h100: {tdp_w: 600}\n",
    "bomb": "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdef", "bcdefg", strict=True))
    + _PLAN
    + "}\n",
    "m30": _M_HEADER + "resnet50,1e30,bf16,1,h100-sxm,0.12\n",
    "mprec": _M_HEADER + "resnet50,64,fp64,1,h100-sxm,0.12\n",
    "mshard": _M_HEADER.replace("\n", ",sharding\n") + "resnet50,64,bf16,8,h100-sxm,0.12,zero9\n",
    "nanswf": _HEAD + _SWF_ROW + _SWF_ROW.replace("1 0 10", "2 nan 10", 1),
    "hugeswf": _HEAD + _SWF_ROW.replace(" 100 4 ", " 100 1000000000 ", 1),
    "bigcluster": "nodes:\n  - {gpu_type: a100-40gb, gpus: 8, count: 100000000000}\n",
    "infload": _PLAN + ", loads_jobs_per_h: [.inf]}\n",
    "bigplan": _PLAN.replace("hours: 1", "hours: 87600").replace("seeds: 1", "seeds: 10000") + "}\n",
    "negsub": "submit,duration,gpus\n-50,3600,4\n",
    "y9999": "submit,duration,gpus\n9999-01-01T00:00:00,3600,4\n",
    "nanenergy": "submit,duration,gpus,energy_j\n0,3600,4,nan\n",
    "hw0": "gpus:\n  h100:\n    bf16_tflops: 0\n",
    "hwinf": "gpus:\n  h100:\n    hbm_gbs: .inf\n",
    "c25": "nodes:\n  - {gpu_type: a100-40gb, gpus: 2.5}\n",
    "cneg": "nodes:\n  - {gpu_type: a100-40gb, gpus: 8, count: -3}\n  - {gpu_type: h100-sxm, gpus: 8}\n",
    "prec": "jobs:\n  - {model: resnet50, batch: 32, steps: 100, precision: fp7}\n",
    "duphdr": "submit,duration,gpus,gpus\n0,3600,4,2\n",
    "mdup": _M_HEADER.replace("model,", "model,model,", 1) + "resnet50," + _M_ROW,
    "ident": _M_HEADER + _M_ROW * 3000,
    "badparam": _PLAN.replace("policies: [zeus]", "policies: [{policy: zeus, params: {no_such_knob: 3}}]")
    + "}\n",
}


def _extra(tmp: Path, argv: tuple[str, ...]) -> dict[str, str]:
    """The EXTRA files the argv names, written under tmp/extra/ (before the listing is taken)."""
    named = {k for k in EXTRA if any("{" + k + "}" in a for a in argv)}
    if named:
        (tmp / "extra").mkdir()
    suffix = {"swf": ".swf", "csv": ".csv"}
    out = {}
    for key in named:
        kind = next((v for k, v in suffix.items() if key.endswith(k)), None)
        kind = kind or (
            ".csv" if key in ("negsub", "y9999", "nanenergy", "duphdr", "mdup", "ident", "m30") else ".yaml"
        )
        path = tmp / "extra" / f"{key}{kind}"
        path.write_text(EXTRA[key])
        out[key] = str(path)
    return out


def _files(tmp: Path) -> dict[str, str]:
    (tmp / "bin.yaml").write_bytes(BINARY)
    raw = TRACE.read_bytes()
    (tmp / "bad.csv.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00garbage" * 20)
    (tmp / "trunc.csv.gz").write_bytes(gzip.compress(raw * 50)[:120])
    (tmp / "blocker").write_text("a file where a directory should be\n")
    (tmp / "jobs.yaml").write_text(
        "jobs:\n  - {id: j1, model: no-such-model, batch: 32, gpus: 1, submit: 0, steps: 100}\n"
    )
    pairs = tmp / "pairs.csv"
    pairs.write_text("model_a,batch_a\n")
    return {
        "bin": str(tmp / "bin.yaml"),
        "gz": str(tmp / "bad.csv.gz"),
        "trunc": str(tmp / "trunc.csv.gz"),
        "unw": str(tmp / "blocker" / "sub"),
        "blocker": str(tmp / "blocker"),
        "tmp": str(tmp),
        "cfg": str(tmp / "cfg.yaml"),
        "joblist": str(tmp / "jobs.yaml"),
        "pairs": str(pairs),
        "plan": str(tmp / "plan.yaml"),
    }


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_bad_input_is_one_line(
    case_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule: exit 2, exactly one stderr line naming the culprit, no traceback, no new file."""
    case = CASES[case_id]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for name in [n for n in os.environ if n.startswith("EASLURM_")]:
        monkeypatch.delenv(name)
    files = {**_files(tmp_path), **_extra(tmp_path, case.argv)}
    if case.config is not None:
        Path(files["cfg"]).write_text(case.config)
        plan = f"name: p\nhours: 1\nseeds: 1\nexperiments:\n  - {{name: e, scenarios: [B], policies: [zeus], {case.config}}}\n"
        Path(files["plan"]).write_text(plan)
    before = _listing(tmp_path)
    argv = [a.format(**files) for a in case.argv]
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, err, captured.out[-500:])
    assert len(lines) == 1, err
    assert lines[0].startswith("easlurm: error: "), err
    assert case.names.format(**files) in lines[0], lines[0]
    assert _listing(tmp_path) == before, "a file was written: " + ", ".join(_listing(tmp_path) - before)


READ_ONLY_CASES = {
    "replay": ("sim", "replay", T, "--out", "{ro}/out"),
    "campaign": ("sim", "campaign", P, "--out", "{ro}/out"),
    "calibrate": ("model", "calibrate", M, "--out", "{ro}/p.yaml"),
    "evaluate": ("model", "evaluate", M, "--out", "{ro}/out"),
    "measure": ("model", "measure", "--model", "resnet50", "--out", "{ro}/m.csv"),
    "profile": ("profile", "--output", "{ro}/s.txt", "--", "true"),
    "report": ("sim", "report", "{ro}"),
}


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
@pytest.mark.parametrize("command", sorted(READ_ONLY_CASES))
def test_read_only_output_directory(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory without write permission is refused before any work, naming the option."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        argv = [a.format(ro=ro) for a in READ_ONLY_CASES[command]]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "permission denied" in err, err
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o700)


def test_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    """atomic_writer: an error mid-write keeps the old file and leaves no temporary file."""
    from easlurm.files import atomic_writer, write_text_atomic

    target = tmp_path / "results.csv"
    write_text_atomic(target, "old\n")
    with pytest.raises(RuntimeError), atomic_writer(target) as fh:
        fh.write("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("EASLURM_SIM__NOISE_SIGMA", "-1", "sim.noise_sigma: must be between 0 and 10"),
        ("EASLURM_SCHED__POWER_BUDGET_W", "-5", "sched.power_budget_w: must be > 0"),
        ("EASLURM_PROFILER__INTERVAL_S", "1e9", "profiler.interval_s: must be between"),
    ],
)
def test_environment_goes_through_the_same_validators(
    variable: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and variable in err and message in err, err


def test_help_needs_no_valid_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`-c FILE` is checked before any command runs, but asking a command for help still works."""
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(BINARY)
    assert main(["-c", str(bad), "sim", "run", "--help"]) == 0
    assert "Usage: easlurm sim run" in capsys.readouterr().out
    assert main(["-c", str(bad), "profile", "--", "echo", "--help"]) == 2
    assert str(bad) in capsys.readouterr().err
