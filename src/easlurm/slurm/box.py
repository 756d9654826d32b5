"""A local heterogeneous Slurm cluster (Debian's: 22.05, 24.11 or 26.05) on one machine (munge, MariaDB, slurmdbd, slurmctld, 5 slurmd).

Used by the demo and the integration tests. Everything lives under one state directory (config, logs,
spool, database, PIDs); nothing is written to /etc. `up` starts only what is not running, `down` stops
exactly the processes `up` recorded, after cancelling jobs. Slurm's power saving is on: its
SuspendProgram/ResumeProgram (`easlurm power suspend|resume`) power a node off and on by stopping and
starting that node's slurmd (`node_off`, `node_on`). GPU power caps that no live step holds are restored
as a site would: `easlurm power restore-caps` before the slurmds start and every CAP_CHECK_PERIOD_S.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from easlurm.errors import ConfigError, SlurmError

log = logging.getLogger(__name__)

DEBIAN_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "slurmdbd",
    "munge",
    "mariadb-server",
    "libslurm-dev",
    "openmpi-bin",
    "libopenmpi-dev",
    # what `make install` needs on a minimal Debian: the virtual environment, and compilers for the SPANK
    # plugin (and headers for any sdist pip must build)
    "python3-venv",
    "python3-dev",
    "gcc",
    "libc6-dev",
    # the per-job metrics test scrapes the node agents with Debian's own Prometheus (docs/metrics.md)
    "prometheus",
)

DB_PASSWORD = "easbox"
#: The checkout's fake sensors (box.fake_sensors) and the process that keeps the fake RAPL counters going.
FAKES = Path(__file__).resolve().parents[3] / "tests" / "fakes"
FAKE_POWERCAP = "fake-powercap"
#: The box's stand-in for a site's timer (docs/spank.md "GPU power caps"): a loop process running
#: `easlurm power restore-caps` every CAP_CHECK_PERIOD_S, as root, with the agents' NVML.
CAP_CHECK = "cap-check"
CAP_CHECK_PERIOD_S = 15
#: gres/shard per GPU (docs/colocation-live.md): the daemon pairs jobs on GPUs with 3 or more (a lone job
#: takes all but one); 0 offers whole GPUs only.
DEFAULT_SHARDS_PER_GPU = 3
#: Slurm keeps a GRES count in 64 bits, but a GPU time-sliced between more jobs than this is no longer
#: "co-location": a larger value is a typo.
MAX_SHARDS_PER_GPU = 64


def check_shards_per_gpu(value: object, where: str) -> int:
    """A shard count per GPU: 0 (whole GPUs only) or 2..MAX; one line naming `where` otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value == 1
        or not 0 <= value <= MAX_SHARDS_PER_GPU
    ):
        raise ConfigError(
            f"{where}: shards per GPU must be 0 (whole GPUs only) or 2..{MAX_SHARDS_PER_GPU}, got {value!r}"
        )
    return value  # a loopback-only throw-away database of the development cluster


@dataclass(frozen=True)
class BoxNode:
    """One virtual node: its own slurmd process listening on its own port."""

    name: str
    gpu_type: str | None
    gpus: int
    cpus: int
    memory_mb: int


NODES: tuple[BoxNode, ...] = (
    BoxNode("a100-1", "a100", 8, 16, 64000),
    BoxNode("a100-2", "a100", 8, 16, 64000),
    BoxNode("h100-1", "h100", 8, 16, 64000),
    BoxNode("h100-2", "h100", 8, 16, 64000),
    BoxNode("cpu-1", None, 0, 16, 64000),
)

#: Partition name -> node names; "all" is the default partition.
PARTITIONS: dict[str, tuple[str, ...]] = {
    "a100": ("a100-1", "a100-2"),
    "h100": ("h100-1", "h100-2"),
    "cpu": ("cpu-1",),
    "all": tuple(n.name for n in NODES),
}

#: Slurm's power saving on the box: seconds a node takes to power down (its slurmd stops within
#: NODE_OFF_TIMEOUT_S, then is killed) and the longest a resume may take (slurmd starts within seconds).
SUSPEND_TIMEOUT_S = 5
RESUME_TIMEOUT_S = 60
NODE_OFF_TIMEOUT_S = 4.0
#: sinfo's compact state suffixes: powered down (~), powering up (#), powering down (%), power down
#: pending (!), not responding (*)
_POWER_SUFFIXES = "~#%!"


def default_box_dir() -> Path:
    """Inside the checkout when run from one (so a test session and its logs stay together), else /tmp.

    The checkout is used only if every user can traverse to it: jobs run as other users read their
    records under the box's spool.
    """
    repo = Path(__file__).resolve().parents[3]
    traversable = all(p.stat().st_mode & 0o001 for p in (repo, *repo.parents))
    if (repo / "pyproject.toml").is_file() and os.access(repo, os.W_OK) and traversable:
        return repo / ".slurm-box"
    return Path("/tmp/easlurm-box")


@dataclass(frozen=True)
class BoxPaths:
    """Every path the box uses, derived from its one state directory."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def pids(self) -> Path:
        return self.run / "pids"

    @property
    def munge_socket(self) -> Path:
        return self.run / "munge" / "munge.socket.2"

    @property
    def db_socket(self) -> Path:
        return self.run / "mysqld.sock"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def fake_powercap(self) -> Path:
        """The fake RAPL tree (box.fake_sensors); spank/install-box points the agents at it when it exists."""
        return self.root / "fake-sensors" / "powercap"

    @property
    def fake_nvml_limits(self) -> Path:
        """The fake NVML's power limits the box's cap check sees (box.fake_sensors): agents whose caps it
        should repair keep theirs there (plugstack `env=EASLURM_FAKE_NVML_LIMITS_FILE=<this>`)."""
        return self.root / "fake-sensors" / "nvml-limits.json"

    @property
    def spool(self) -> Path:
        """Where node records meet: the SPANK plugin's `spool=` (spank/install-box writes the same)."""
        return self.root / "spool" / "easlurm"

    def power_program(self, event: str) -> Path:
        """slurm.conf's SuspendProgram (`suspend`) or ResumeProgram (`resume`)."""
        return self.etc / f"power-{event}"

    @property
    def power_config(self) -> Path:
        """The easlurm settings the power programs run with: the box's node-off/node-on per node."""
        return self.etc / "easlurm-power.yaml"

    @property
    def mail_program(self) -> Path:
        """slurm.conf's MailProg: scripts/easlurm-mailprog with the box's queue and settings."""
        return self.etc / "mailprog"

    @property
    def mail_capture(self) -> Path:
        """The box's mailer (mail.mailer): it keeps each mail as a file in `mail_sent`, sending nothing."""
        return self.etc / "mail-capture"

    @property
    def mail_sent(self) -> Path:
        """Where the box's mailer keeps what a site's would have sent: one file per mail."""
        return self.root / "mail"

    @property
    def mail_config(self) -> Path:
        """The easlurm settings the mail drain runs with (mail.mailer: the capture)."""
        return self.etc / "easlurm-mail.yaml"


@dataclass(frozen=True)
class Ports:
    """Loopback ports, all derived from one base so two boxes can coexist."""

    base: int

    @property
    def slurmctld(self) -> int:
        return self.base

    @property
    def slurmdbd(self) -> int:
        return self.base + 2

    @property
    def mariadb(self) -> int:
        return self.base + 3

    def slurmd(self, index: int) -> int:
        return self.base + 10 + index


class SlurmBox:
    """Install, start, stop and inspect the local cluster."""

    def __init__(
        self,
        root: str | Path | None = None,
        cluster_name: str = "easbox",
        base_port: int = 16817,
        shards_per_gpu: int = DEFAULT_SHARDS_PER_GPU,
        shards_source: str = "box.shards_per_gpu",
        fake_sensors: bool = True,
        suspend_time_s: int = 86400,
    ):
        self.paths = BoxPaths(Path(root) if root else default_box_dir())
        self.suspend_time_s = int(suspend_time_s)
        self.cluster_name = cluster_name
        self.ports = Ports(base_port)
        self.shards_per_gpu = check_shards_per_gpu(shards_per_gpu, shards_source)
        self.fake_sensors = fake_sensors and FAKES.is_dir()  # the fakes ship with a checkout only
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # ---- environment -------------------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """Variables a client (sbatch, sacct, easlurm) needs to talk to this box: Slurm's configuration,
        and easlurm's settings that must match the box's plugin (its spool, the scheduler's hint files
        under `<spool>/sched`, which the plugin reads) or stay inside the box (the decision log)."""
        return {
            "SLURM_CONF": str(self.paths.slurm_conf),
            "EASLURM_SPANK__SPOOL": str(self.paths.spool),
            "EASLURM_SCHED__ENV_DIR": str(self.paths.spool / "sched"),
            "EASLURM_SCHED__DECISION_LOG": str(self.paths.log / "schedd.jsonl"),
            "EASLURM_BOX__DIR": str(self.paths.root),
            "EASLURM_BOX__BASE_PORT": str(self.ports.base),
            "EASLURM_BOX__FAKE_SENSORS": "true" if self.fake_sensors else "false",
        }

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    # ---- install -----------------------------------------------------------------------------------
    @staticmethod
    def missing_packages() -> list[str]:
        missing = []
        for pkg in DEBIAN_PACKAGES:
            res = subprocess.run(
                ["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True, check=False
            )
            if "install ok installed" not in res.stdout:
                missing.append(pkg)
        return missing

    def install(self) -> None:
        """apt-get install the Debian packages (never slurm-wlm-emulator: it repoints the daemons)."""
        missing = self.missing_packages()
        if not missing:
            log.info("all packages present")
            return
        if os.geteuid() != 0:
            raise SlurmError(f"installing {' '.join(missing)} needs root")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "update", "-qq"], env=env)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)

    # ---- configuration -----------------------------------------------------------------------------
    def write_config(self) -> None:
        """(Re)write every configuration file and fake GPU device under the state directory."""
        p = self.paths
        for d in (
            p.etc,
            p.etc / "plugstack.d",
            p.log,
            p.pids,
            p.munge_socket.parent,
            p.dev,
            p.lib,
            p.root / "state",
            p.root / "spool",
            p.root / "mysql",
        ):
            d.mkdir(parents=True, exist_ok=True)
        p.root.chmod(0o755)
        p.munge_socket.parent.chmod(0o755)
        self._make_gpu_devices()
        p.slurm_conf.write_text(self._slurm_conf())
        (p.etc / "gres.conf").write_text(self._gres_conf())
        (p.etc / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n")
        plug = p.etc / "plugstack.conf"
        plug.write_text(
            "# easlurm development cluster: the easlurm SPANK plugin installs its line into plugstack.d\n"
            f"include {p.etc}/plugstack.d/*.conf\n"
        )
        dbd = p.etc / "slurmdbd.conf"
        dbd.write_text(self._slurmdbd_conf())
        dbd.chmod(0o600)
        self._write_power_programs()
        self._write_mail_program()

    def _write_power_programs(self) -> None:
        """SuspendProgram and ResumeProgram: `easlurm power suspend|resume` with this Python, this checkout
        and the box's settings baked in (slurmctld runs them with its own environment), whose per-node
        commands are `slurm-box node-off|node-on NODE`."""
        box_cli = [sys.executable, "-m", "easlurm.slurm.box_cli"]
        settings = {
            "power": {
                "suspend_command": [*box_cli, "node-off", "{node}"],
                "resume_command": [*box_cli, "node-on", "{node}"],
                "command_timeout_s": 30,
            }
        }
        # JSON is YAML: no PyYAML needed to write it
        self.paths.power_config.write_text(
            "# generated by easlurm scripts/slurm-box: settings of the box's power programs\n"
            + json.dumps(settings, indent=1)
            + "\n"
        )
        assignments = self._program_env()
        for event in ("suspend", "resume"):
            prog = self.paths.power_program(event)
            tmp = prog.with_name(f".{prog.name}.tmp")
            tmp.write_text(
                "#!/bin/sh\n"
                f"# generated by easlurm scripts/slurm-box: Slurm's {event.capitalize()}Program for the local\n"
                "# cluster; $1 is a hostlist. Each node's command stops or starts its slurmd.\n"
                f"exec /usr/bin/env -i {assignments} {shlex.quote(sys.executable)} -m easlurm.cli "
                f'-c {shlex.quote(str(self.paths.power_config))} power {event} "$@"\n'
            )
            tmp.chmod(0o755)
            os.replace(tmp, prog)

    def _program_env(self) -> str:
        """The environment a program slurmctld runs gets here (slurmctld passes its own only): this
        checkout's Python path and the box's settings, as `env -i` assignments."""
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "HOME": os.environ.get("HOME", "/root"),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            **self.env,
        }
        return " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())

    def _write_mail_program(self) -> None:
        """MailProg: the checkout's scripts/easlurm-mailprog, whose drain hands each mail to a capture
        mailer that keeps it under `mail_sent` (the box sends no mail). A harmless default: a job submitted
        with --mail-type gets its card there, every other job is untouched."""
        p = self.paths
        p.mail_sent.mkdir(parents=True, exist_ok=True)
        capture = p.mail_capture.with_name(f".{p.mail_capture.name}.tmp")
        capture.write_text(
            "#!/bin/sh\n"
            "# generated by easlurm scripts/slurm-box: the box's mailer; keeps each mail (its argv, then the body)\n"
            f"d={shlex.quote(str(p.mail_sent))}\n"
            'f="$d/$(date +%s%N)-$$.txt"\n'
            '{ printf \'argv:\'; printf \' [%s]\' "$@"; printf \'\\n\'; cat; } >"$f.tmp" && mv "$f.tmp" "$f"\n'
        )
        capture.chmod(0o755)
        os.replace(capture, p.mail_capture)
        settings = {
            "mail": {
                "mailer": [str(p.mail_capture), "-s", "{subject}", "{recipient}"],
                "rate_per_min": 600,
                "max_wait_s": 60,
            },
            # the box's jobs run seconds: note an idle allocated GPU from the first one
            "notes": {"idle_gpu_min_s": 0},
        }
        p.mail_config.write_text(
            "# generated by easlurm scripts/slurm-box: settings of the box's mail drain\n"
            + json.dumps(settings, indent=1)
            + "\n"
        )
        drain = f"{sys.executable} -m easlurm.cli -c {p.mail_config}"
        script = Path(__file__).resolve().parents[3] / "scripts" / "easlurm-mailprog"
        prog = p.mail_program.with_name(f".{p.mail_program.name}.tmp")
        prog.write_text(
            "#!/bin/sh\n"
            "# generated by easlurm scripts/slurm-box: Slurm's MailProg for the local cluster\n"
            f"exec /usr/bin/env -i {self._program_env()} "
            f"{shlex.quote('EASLURM_MAIL_SPOOL=' + str(p.spool / 'mail'))} "
            f"{shlex.quote('EASLURM_MAIL_DRAIN=' + drain)} "
            # what slurmctld tells MailProg about the job
            '"SLURM_JOB_ID=${SLURM_JOB_ID:-}" "SLURM_JOB_MAIL_TYPE=${SLURM_JOB_MAIL_TYPE:-}" '
            f'"SLURM_JOB_STATE=${{SLURM_JOB_STATE:-}}" {shlex.quote(str(script))} "$@"\n'
        )
        prog.chmod(0o755)
        os.replace(prog, p.mail_program)

    def _make_gpu_devices(self) -> None:
        """Character devices (c 1 3, like /dev/null) stand in for /dev/nvidiaN: Slurm drops file-less GPUs."""
        for node in NODES:
            if not node.gpu_type:
                continue
            ddir = self.paths.dev / node.name
            ddir.mkdir(parents=True, exist_ok=True)
            for i in range(node.gpus):
                dev = ddir / f"nvidia{i}"
                if not dev.exists():
                    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))

    def _slurm_conf(self) -> str:
        p, ports = self.paths, self.ports
        lines = [
            "# generated by easlurm scripts/slurm-box: the local development cluster",
            f"ClusterName={self.cluster_name}",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ports.slurmctld}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"AuthInfo=socket={p.munge_socket}",
            f"StateSaveLocation={p.root / 'state'}",
            f"SlurmdSpoolDir={p.root / 'spool'}/slurmd-%n",
            f"SlurmctldPidFile={p.run / 'slurmctld.pid'}",
            f"SlurmdPidFile={p.run / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={p.log / 'slurmctld.log'}",
            f"SlurmdLogFile={p.log / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"PlugStackConfig={p.etc / 'plugstack.conf'}",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "KillWait=5",
            # a finished job stays in slurmctld's memory this long (and counts against MaxJobCount)
            "MinJobAge=30",
            # Slurm keeps at most 10,000 jobs in memory by default: benchmarks/bench_schedd.py --slurm
            # queues 10,000 or 50,000 declared jobs beside whatever else runs on the box, and the jobs it
            # cancels count until MinJobAge has passed
            "MaxJobCount=200000",
            "Waittime=0",
            "GresTypes=gpu,shard" if self.shards_per_gpu else "GresTypes=gpu",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=5,sched_interval=5",
            "PriorityType=priority/multifactor",
            "PriorityWeightAge=1000",
            "PriorityWeightFairshare=1000",
            "PriorityWeightJobSize=0",
            "PriorityWeightPartition=0",
            "PriorityWeightQOS=0",
            "PriorityMaxAge=1-0",
            "PriorityDecayHalfLife=1-0",
            "PreemptType=preempt/none",
            "JobRequeue=1",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={ports.slurmdbd}",
            f"AccountingStoragePass={p.munge_socket}",
            "AccountingStorageTRES=gres/gpu,gres/gpu:a100,gres/gpu:h100"
            + (",gres/shard" if self.shards_per_gpu else ""),
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=30",
            "JobCompType=jobcomp/none",
            # Slurm's power saving (docs/power-saving.md): a node idle for SuspendTime is powered down by
            # SuspendProgram (the box stops its slurmd) and resumed for a job by ResumeProgram (starts it)
            f"MailProg={p.mail_program}",
            f"SuspendProgram={p.power_program('suspend')}",
            f"ResumeProgram={p.power_program('resume')}",
            f"SuspendTime={self.suspend_time_s}",
            f"SuspendTimeout={SUSPEND_TIMEOUT_S}",
            f"ResumeTimeout={RESUME_TIMEOUT_S}",
        ]
        for i, node in enumerate(NODES):
            gres = f" Gres=gpu:{node.gpu_type}:{node.gpus}" if node.gpu_type else ""
            if node.gpu_type and self.shards_per_gpu:
                gres += f",shard:{node.gpus * self.shards_per_gpu}"
            feat = f" Features={node.gpu_type}" if node.gpu_type else " Features=cpu"
            lines.append(
                f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports.slurmd(i)} "
                f"CPUs={node.cpus} RealMemory={node.memory_mb}{gres}{feat} State=UNKNOWN"
            )
        for name, members in PARTITIONS.items():
            default = "YES" if name == "all" else "NO"
            lines.append(
                f"PartitionName={name} Nodes={','.join(members)} Default={default} MaxTime=INFINITE State=UP"
            )
        return "\n".join(lines) + "\n"

    def _gres_conf(self) -> str:
        lines = ["# fake GPUs: character devices so CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS are set"]
        for node in NODES:
            if node.gpu_type:
                lines.append(
                    f"NodeName={node.name} Name=gpu Type={node.gpu_type} "
                    f"File={self.paths.dev / node.name}/nvidia[0-{node.gpus - 1}]"
                )
                # one line per GPU: each GPU gets the same number of shards, tied to its device file
                # (Slurm gives the shards the GPU's type)
                for i in range(node.gpus if self.shards_per_gpu else 0):
                    lines.append(
                        f"NodeName={node.name} Name=shard Count={self.shards_per_gpu} "
                        f"File={self.paths.dev / node.name}/nvidia{i}"
                    )
        return "\n".join(lines) + "\n"

    def _slurmdbd_conf(self) -> str:
        p = self.paths
        return (
            "\n".join(
                [
                    f"AuthInfo=socket={p.munge_socket}",
                    "DbdHost=localhost",
                    f"DbdPort={self.ports.slurmdbd}",
                    "SlurmUser=root",
                    f"LogFile={p.log / 'slurmdbd.log'}",
                    f"PidFile={p.run / 'slurmdbd.pid'}",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.ports.mariadb}",
                    "StorageUser=slurm",
                    f"StoragePass={DB_PASSWORD}",
                    "StorageLoc=slurm_acct_db",
                    "DebugLevel=info",
                ]
            )
            + "\n"
        )

    # ---- process bookkeeping ----------------------------------------------------------------------
    def _pid_file(self, name: str) -> Path:
        return self.paths.pids / f"{name}.pid"

    def pid_of(self, name: str) -> int | None:
        """PID recorded for a daemon if that process is still alive and is the program we started."""
        try:
            pid = int(self._pid_file(name).read_text().split()[0])
            program = self._pid_file(name).read_text().split()[1]
        except (OSError, ValueError, IndexError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            return None
        if Path(cmdline).name != program:
            return None
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return pid

    def _spawn(self, name: str, argv: Sequence[str], extra_env: dict[str, str] | None = None) -> int:
        logf = open(self.paths.log / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**self.client_env(), **(extra_env or {})},
        )
        logf.close()
        self._children[name] = proc
        self._pid_file(name).write_text(f"{proc.pid} {Path(argv[0]).name}\n")
        log.info("started %s pid %d", name, proc.pid)
        return proc.pid

    def daemons(self) -> list[str]:
        fakes = [FAKE_POWERCAP] if self.fake_sensors else []
        return [*fakes, "munged", "mariadbd", "slurmdbd", "slurmctld", *[f"slurmd-{n.name}" for n in NODES]]

    # ---- up ----------------------------------------------------------------------------------------
    def up(self, timeout_s: float = 90.0) -> None:
        """Start whatever is not running yet; return once every node is idle."""
        missing = self.missing_packages()
        if missing:
            raise SlurmError(f"packages missing: {' '.join(missing)} (run: scripts/slurm-box install)")
        self.write_config()
        deadline = time.monotonic() + timeout_s
        self._fake_sensors(deadline)
        self._install_spank()
        self._start_munge()
        self._start_mariadb(deadline)
        if self.pid_of("slurmdbd") is None:
            # slurmdbd has no -f: it reads slurmdbd.conf beside $SLURM_CONF
            self._spawn("slurmdbd", ["/usr/sbin/slurmdbd", "-D"])
        self._wait_daemon_port("slurmdbd", self.ports.slurmdbd, deadline, "slurmdbd.log")
        self._ensure_accounts()
        if self.pid_of("slurmctld") is None:
            self._spawn("slurmctld", ["/usr/sbin/slurmctld", "-D", "-f", str(self.paths.slurm_conf)])
        self._wait_daemon_port("slurmctld", self.ports.slurmctld, deadline, "slurmctld.log")
        states = self.node_states()
        starting = [
            n.name
            for n in NODES
            if self.pid_of(f"slurmd-{n.name}") is None and not powered_down(states.get(n.name, ""))
        ]
        self._cap_check(before_slurmd=bool(starting))
        for name in starting:
            # a node Slurm is powering up gets the slurmd its ResumeProgram would have started
            self._start_slurmd(name, booted="#" in states.get(name, ""))
        self._wait_nodes_idle(deadline)

    def cap_check_argv(self) -> list[str]:
        return [sys.executable, "-m", "easlurm.cli", "power", "restore-caps"]

    def cap_check_env(self) -> dict[str, str]:
        """The agents' NVML, for the cap check: with fake sensors the checkout's fake NVML, its limits in
        `paths.fake_nvml_limits`."""
        src = str(Path(__file__).resolve().parents[2])
        if not self.fake_sensors:
            return {"PYTHONPATH": src}
        return {
            "PYTHONPATH": f"{src}{os.pathsep}{FAKES}",
            "EASLURM_PROFILER__NVML_MODULE": "easlurm_fakes.fake_nvml",
            "EASLURM_FAKE_NVML_COUNT": "8",
            "EASLURM_FAKE_NVML_LIMITS_FILE": str(self.paths.fake_nvml_limits),
        }

    def _cap_check(self, before_slurmd: bool) -> None:
        """What a site installs (docs/spank.md "GPU power caps"): `easlurm power restore-caps` once before
        slurmd starts (its unit's ExecStartPre) and every CAP_CHECK_PERIOD_S (its timer). A failure is
        logged: the box comes up anyway."""
        env = self.cap_check_env()
        if before_slurmd:
            res = subprocess.run(
                self.cap_check_argv(),
                env={**self.client_env(), **env},
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            if res.returncode != 0:
                log.warning("power restore-caps: %s", res.stderr.strip()[-500:])
        if self.pid_of(CAP_CHECK) is None:
            loop = "import subprocess, sys, time\nwhile True:\n    subprocess.run(sys.argv[2:])\n    time.sleep(float(sys.argv[1]))\n"
            self._spawn(
                CAP_CHECK, [sys.executable, "-c", loop, str(CAP_CHECK_PERIOD_S), *self.cap_check_argv()], env
            )

    def _start_slurmd(self, node: str, booted: bool = False) -> int:
        """A node's slurmd. `booted` (-b): it reports the host as booted when it starts, as a node that
        was powered up does; slurmctld accepts a resumed node only if it booted after the resume request
        (its boot time is now minus the uptime slurmd reports), else the job waits for ResumeTimeout and
        the node is set DOWN."""
        argv = [
            "/usr/sbin/slurmd",
            *(["-b"] if booted else []),
            "-D",
            "-N",
            node,
            "-f",
            str(self.paths.slurm_conf),
        ]
        return self._spawn(f"slurmd-{node}", argv)

    # ---- power saving: a node's slurmd stands for its power -------------------------------------------
    def node_states(self) -> dict[str, str]:
        """{node: sinfo's compact state with its suffixes ("idle", "idle~", "alloc#")}; {} when slurmctld
        does not answer."""
        if self.pid_of("slurmctld") is None:
            return {}
        res = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"],
            capture_output=True,
            text=True,
            env=self.client_env(),
            check=False,
            timeout=30,
        )
        return dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)

    def _node(self, name: str) -> BoxNode:
        for node in NODES:
            if node.name == name:
                return node
        raise ConfigError(f"unknown node {name!r} (the box's nodes: {', '.join(n.name for n in NODES)})")

    def node_off(self, name: str, timeout_s: float = NODE_OFF_TIMEOUT_S) -> None:
        """Power a node off: stop its slurmd by its PID file (SIGTERM, SIGKILL after `timeout_s`) and
        wait until it is gone; a slurmd left by an earlier start (slurmd's own PID file) goes too, so the
        next start does not wait on it. Nothing running: nothing to do."""
        self._node(name)
        self._stop(f"slurmd-{name}", timeout_s=timeout_s)
        stale = self._slurmd_by_own_pid_file(name)
        if stale is not None:
            log.warning("slurmd-%s: stopping pid %d (slurmd's own PID file)", name, stale)
            _terminate(stale, timeout_s)

    def node_on(self, name: str) -> None:
        """Power a node on: start its slurmd as a freshly booted node (-b). A slurmd that still runs (a
        node Slurm set powered down after a failed resume) is restarted: slurmctld waits for a boot."""
        self._node(name)
        if self.pid_of(f"slurmd-{name}") is not None:
            log.warning("slurmd-%s runs already: restarting it as booted", name)
        self.node_off(name)  # also a slurmd a new one would wait for ("killing old slurmd")
        self._start_slurmd(name, booted=True)

    def _slurmd_by_own_pid_file(self, name: str) -> int | None:
        """The process in slurmd's own PID file (SlurmdPidFile) if it is this node's slurmd."""
        try:
            pid = int((self.paths.run / f"slurmd-{name}.pid").read_text().split()[0])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError, IndexError):
            return None
        words = [a.decode(errors="replace") for a in argv]
        if Path(words[0]).name != "slurmd" or name not in words or stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return pid

    def _wait_daemon_port(self, name: str, port: int, deadline: float, logname: str) -> None:
        """Wait for a daemon's port; fail at once, with its output, if the daemon died."""
        import socket

        def listening() -> bool:
            child = self._children.get(name)
            if child is not None and child.poll() is not None:
                out = (self.paths.log / f"{name}.out").read_text(errors="replace").strip().splitlines()[-3:]
                raise SlurmError(
                    f"{name} exited at start (see {self.paths.log / logname}): {' | '.join(out)}"
                )
            with socket.socket() as s:
                s.settimeout(0.5)
                return s.connect_ex(("127.0.0.1", port)) == 0

        _wait_for(listening, deadline, f"{name} on port {port}", self.paths.log / logname)

    def _fake_sensors(self, deadline: float) -> None:
        """box.fake_sensors: a fake RAPL tree whose counters a small process keeps advancing (package 60 W,
        of which core 40 W; DRAM 6 W), for the agents the plugin starts (spank/install-box also points
        them at the fake NVML). Off: that process is stopped and its tree removed."""
        import shutil

        tree = self.paths.fake_powercap
        if not self.fake_sensors:
            self._stop(FAKE_POWERCAP)
            shutil.rmtree(tree.parent, ignore_errors=True)
            return
        if self.pid_of(FAKE_POWERCAP) is not None:
            return
        shutil.rmtree(tree, ignore_errors=True)
        tree.parent.mkdir(parents=True, exist_ok=True)
        ticks = [a for zone in ("package-0=60", "core-0=40", "dram-0=6") for a in ("--tick", zone)]
        self._spawn(
            FAKE_POWERCAP,
            [sys.executable, "-m", "easlurm_fakes.powercap", str(tree), *ticks, "--period", "0.05"],
            {"PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        )
        _wait_for(
            lambda: (tree / "intel-rapl:0" / "energy_uj").exists(),
            deadline,
            "the fake RAPL tree",
            self.paths.log / f"{FAKE_POWERCAP}.out",
        )
        tree.parent.chmod(0o755)

    def _install_spank(self) -> None:
        """Build and install the easlurm SPANK plugin when the checkout provides its installer."""
        installer = Path(__file__).resolve().parents[3] / "spank" / "install-box"
        if installer.is_file() and os.access(installer, os.X_OK):
            res = subprocess.run(
                [str(installer), str(self.paths.root), sys.executable],
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, "EASLURM_BOX__FAKE_SENSORS": "true" if self.fake_sensors else "false"},
            )
            if res.returncode != 0:
                log.warning("SPANK plugin not installed: %s", (res.stderr or res.stdout).strip()[-500:])

    def _start_munge(self) -> None:
        if self.pid_of("munged") is not None:
            return
        key = self.paths.etc / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = self.paths.munge_socket
        self._spawn(
            "munged",
            [
                "/usr/sbin/munged",
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={sock}",
                f"--pid-file={self.paths.run / 'munged.pid'}",
                f"--log-file={self.paths.log / 'munged.log'}",
                f"--seed-file={self.paths.run / 'munged.seed'}",
            ],
        )
        _wait_for(
            lambda: sock.exists(), time.monotonic() + 15, "munged socket", self.paths.log / "munged.out"
        )

    def _start_mariadb(self, deadline: float) -> None:
        if self.pid_of("mariadbd") is not None:
            return
        datadir = self.paths.root / "mysql"
        fresh = not (datadir / "mysql").is_dir()
        if fresh:
            _run(
                [
                    "mariadb-install-db",
                    "--no-defaults",
                    "--force",  # also where the host name does not resolve (a fresh root without /etc/hosts)
                    f"--datadir={datadir}",
                    "--user=root",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                ]
            )
        self._spawn(
            "mariadbd",
            [
                "/usr/sbin/mariadbd",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                f"--socket={self.paths.db_socket}",
                f"--port={self.ports.mariadb}",
                "--bind-address=127.0.0.1",
                f"--pid-file={self.paths.run / 'mariadbd.pid'}",
                f"--log-error={self.paths.log / 'mariadb.err'}",
                "--innodb-buffer-pool-size=64M",
                "--max-allowed-packet=16M",
                "--innodb-lock-wait-timeout=900",
                "--skip-name-resolve",
                # MariaDB 11.8 turns snapshot isolation on; slurmdbd 26.05 then exits on the first write
                # conflict (an AdminComment written by sacctmgr racing slurmctld's job-end write). `loose-`:
                # MariaDB 10.11 (Debian 12), which has no such option, ignores it.
                "--loose-innodb-snapshot-isolation=OFF",
            ],
        )
        _wait_for(
            lambda: self.paths.db_socket.exists(), deadline, "mariadbd socket", self.paths.log / "mariadb.err"
        )
        # The accounting database exists before slurmdbd first connects: slurmdbd 24.11+ creating it
        # itself reuses its connection after the failed open, and libmariadb 3.4 then fails the next query
        # (`5027 ... _check_mysql_concat_is_sane`, slurmdbd exits). Idempotent, so also for older boxes.
        sql = (
            "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';FLUSH PRIVILEGES;"
        )
        _run(["mariadb", "--no-defaults", f"--socket={self.paths.db_socket}", "-uroot", "-e", sql])

    def _ensure_accounts(self) -> None:
        """Register the cluster, an account and root in slurmdbd (idempotent)."""
        env = self.client_env()
        out = _run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], env=env)
        if self.cluster_name not in out.split():
            _run(["sacctmgr", "-i", "add", "cluster", self.cluster_name], env=env)
        out = _run(["sacctmgr", "-n", "-P", "show", "assoc", "format=account,user"], env=env)
        if "easlurm|root" not in out.split():
            subprocess.run(
                [
                    "sacctmgr",
                    "-i",
                    "add",
                    "account",
                    "easlurm",
                    "Description=easlurm",
                    "Organization=easlurm",
                ],
                env=env,
                capture_output=True,
                check=False,
            )
            _run(
                ["sacctmgr", "-i", "add", "user", "root", "account=easlurm", "DefaultAccount=easlurm"],
                env=env,
            )

    def _wait_nodes_idle(self, deadline: float) -> None:
        env = self.client_env()
        names = {n.name for n in NODES}

        def ready() -> bool:
            res = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=env, check=False
            )
            states = dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)
            bad = [
                n
                for n in names
                if n not in states or states[n].rstrip("*" + _POWER_SUFFIXES) not in ("idle", "mix", "alloc")
            ]
            for n in bad:
                if states.get(n, "").rstrip("*" + _POWER_SUFFIXES) in ("down", "drain", "drng"):
                    subprocess.run(
                        ["scontrol", "update", f"NodeName={n}", "State=RESUME"],
                        env=env,
                        capture_output=True,
                        check=False,
                    )
            return not bad

        _wait_for(ready, deadline, "nodes idle", self.paths.log / "slurmctld.log")

    # ---- down --------------------------------------------------------------------------------------
    def down(self, timeout_s: float = 60.0) -> None:
        """Cancel jobs, then stop the processes `up` recorded (slurmd first, munge last)."""
        env = self.client_env()
        if self.pid_of("slurmctld") is not None:
            subprocess.run(
                ["scancel", "--full", "--quiet", "--state=PENDING"], env=env, capture_output=True, check=False
            )
            res = subprocess.run(
                ["squeue", "-h", "-o", "%A"], capture_output=True, text=True, env=env, check=False
            )
            jobs = res.stdout.split()
            if jobs:
                subprocess.run(["scancel", *jobs], env=env, capture_output=True, check=False)
                end = time.monotonic() + 20
                while time.monotonic() < end:
                    res = subprocess.run(
                        ["squeue", "-h", "-o", "%A"], capture_output=True, text=True, env=env, check=False
                    )
                    if not res.stdout.split():
                        break
                    time.sleep(0.5)
        self._stop(CAP_CHECK)
        for node in NODES:
            self._stop(f"slurmd-{node.name}")
        self._kill_orphan_stepds()
        for name in ("slurmctld", "slurmdbd", "mariadbd", "munged"):
            self._stop(name, timeout_s=timeout_s / 2)
        self._stop(FAKE_POWERCAP)

    def _stop(self, name: str, timeout_s: float = 15.0) -> None:
        pid = self.pid_of(name)
        if pid is None:
            self._pid_file(name).unlink(missing_ok=True)
            return
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and self.pid_of(name) is not None:
            time.sleep(0.1)
        if self.pid_of(name) is not None:
            log.warning("%s did not stop on SIGTERM; killing", name)
            os.kill(pid, signal.SIGKILL)
            end = time.monotonic() + 5
            while time.monotonic() < end and self.pid_of(name) is not None:
                time.sleep(0.05)
        child = self._children.pop(name, None)
        if child is not None:  # reap our own child; daemons from an earlier `up` are init's to reap
            child.wait(timeout=5)
        self._pid_file(name).unlink(missing_ok=True)
        log.info("stopped %s", name)

    def _kill_orphan_stepds(self) -> None:
        """slurmstepd processes of this box (their spool dir is ours) that outlived their slurmd."""
        spool = str(self.paths.root / "spool")
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if not proc.joinpath("cmdline").read_bytes().startswith(b"slurmstepd"):
                    continue
                if not os.readlink(proc / "cwd").startswith(spool):
                    continue
                os.kill(int(proc.name), signal.SIGKILL)
            except OSError:
                continue

    # ---- status ------------------------------------------------------------------------------------
    def slurm_version(self) -> str | None:
        """The installed Slurm's version ("24.11.5"), None when Slurm is not installed."""
        try:
            out = _run(["sinfo", "--version"], env=self.client_env())
        except (SlurmError, OSError):
            return None
        parts = out.split()
        return parts[-1] if parts else None

    def status(self) -> dict[str, int | None]:
        return {name: self.pid_of(name) for name in [*self.daemons(), CAP_CHECK]}

    def powered_down_nodes(self) -> list[str]:
        """Nodes Slurm's power saving has powered down (or is powering down): their slurmd is off."""
        states = self.node_states()
        return [n.name for n in NODES if powered_down(states.get(n.name, ""))]

    def is_up(self) -> bool:
        """Every daemon runs, but the slurmd of a node that Slurm powered down."""
        # the cap check is not a daemon Slurm needs: a box started without it is up (and `up` adds it)
        status = {name: pid for name, pid in self.status().items() if name != CAP_CHECK}
        if all(pid is not None for pid in status.values()):
            return True
        off = {f"slurmd-{n}" for n in self.powered_down_nodes()}
        return all(pid is not None or name in off for name, pid in status.items())


def powered_down(state: str) -> bool:
    """An idle node that Slurm's power saving powered down or is powering down (sinfo `idle~`, `idle%`);
    a DOWN or drained one is not (its slurmd must come back for it to return to service)."""
    base = state.rstrip("*" + _POWER_SUFFIXES)
    return base == "idle" and any(c in state for c in "~%")


def _terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM a process, SIGKILL it after `timeout_s`, and wait until it has gone (or is a zombie)."""

    def alive() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and alive():
        time.sleep(0.05)
    if alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 5
        while time.monotonic() < end and alive():
            time.sleep(0.05)


def _run(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SlurmError(
            f"{' '.join(argv[:3])} failed ({res.returncode}): {(res.stderr or res.stdout).strip()}"
        )
    return res.stdout


def _wait_for(pred: object, deadline: float, what: str, logfile: Path) -> None:
    assert callable(pred)
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    tail = ""
    with contextlib.suppress(OSError):
        tail = " | ".join(logfile.read_text(errors="replace").strip().splitlines()[-3:])
    raise SlurmError(f"timed out waiting for {what} (see {logfile}): {tail}")
