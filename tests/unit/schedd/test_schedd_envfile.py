"""The daemon's per-job env files (read by the SPANK plugin at task start): written before anything lets
the job start, in a 0755 directory with 0644 files, and removed once Slurm no longer knows the job."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from schedd_fake import FakeSchedClient, job, node

from easlurm.model.oracle import Oracle
from easlurm.priority import holds
from easlurm.priority.apply import Kind, PlanContext, plan, prune_env_files, write_env_file
from easlurm.priority.daemon import Daemon, DaemonConfig
from easlurm.priority.metrics import Metrics
from easlurm.priority.snapshot import ClusterSnapshot, Decision, StartJob

NOW = 1_800_000_000.0
SPEC = "energy-profile=model=resnet50,steps=2000,batch=64:128,gpus=1:2"


def test_env_is_planned_before_the_release_that_lets_the_job_start() -> None:
    """A held job the policy starts: its placement first (hints only for a placement Slurm accepted), then
    its env file, before the release and order that let it start."""
    fields = holds.hold_fields(job("7"), NOW - 10, 600.0)
    marked = job("7", gpu_type="h100", gpus_per_node=2, admin_comment=fields["AdminComment"])
    assert holds.mark_of(marked) is not None
    ctx = PlanContext(
        now_s=NOW,
        jobs={"7": marked},
        nodes={},
        declared=frozenset({"7"}),
        site_factors={},
        hold_ttl_s=600.0,
    )
    d = Decision(starts=(StartJob("7", "h100-1", 4, 256, "h100"),))
    kinds = [a.kind for a in plan(d, ClusterSnapshot(time_s=NOW, nodes=()), ctx)]
    assert Kind.RELEASE in kinds and Kind.PLACE in kinds and Kind.ORDER in kinds
    assert kinds[:3] == [Kind.PLACE, Kind.ENV, Kind.RELEASE]


def test_write_env_file_modes_the_plugin_accepts(tmp_path: Path) -> None:
    old = os.umask(0o002)  # a group-writable umask must not leak into what the plugin checks
    try:
        path = write_env_file(tmp_path / "sched", "42", {"EASLURM_GPUS": "2"})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not stat.S_IMODE(path.parent.stat().st_mode) & 0o022
    assert path.read_text() == "EASLURM_GPUS=2\n"


def test_prune_removes_only_files_of_unknown_jobs(tmp_path: Path) -> None:
    d = tmp_path / "sched"
    for jid in ("1", "2", "30"):
        write_env_file(d, jid, {"EASLURM_GPUS": "1"})
    (d / "notes.txt").write_text("kept")
    (d / "job-x.env").write_text("kept: not a job file name")
    assert prune_env_files(d, {"2"}) == ["1", "30"]
    assert sorted(p.name for p in d.iterdir()) == ["job-2.env", "job-x.env", "notes.txt"]
    assert prune_env_files(tmp_path / "missing", set()) == []


def test_daemon_cycle_prunes_stale_files_and_keeps_live_ones(tmp_path: Path) -> None:
    jobs = [job(str(i), comment=SPEC, gpu_type="h100", submit_s=NOW - 10 * i) for i in (1, 2)]
    jobs.append(job("3", state="COMPLETED"))
    client = FakeSchedClient(jobs, [node("h100-1", "h100", used=0)], now_s=NOW)
    env = tmp_path / "env"
    for jid in ("3", "999"):  # 3: Slurm still lists it; 999: unknown (an id from an earlier life)
        write_env_file(env, jid, {"EASLURM_GPUS": "8"})
    cfg = DaemonConfig(policy="zeus", env_dir=env, hold_ttl_s=600.0)
    rep = Daemon(client, cfg, oracle=Oracle(), metrics=Metrics(), clock=lambda: NOW).cycle()
    assert rep.error is None and rep.decision is not None and rep.decision.starts
    names = {p.name for p in env.iterdir()}
    assert "job-999.env" not in names and "job-3.env" in names
    assert {f"job-{s.job_id}.env" for s in rep.decision.starts} <= names
    dry = DaemonConfig(policy="zeus", env_dir=env, hold_ttl_s=600.0, dry_run=True)
    write_env_file(env, "998", {"EASLURM_GPUS": "8"})
    Daemon(client, dry, oracle=Oracle(), metrics=Metrics(), clock=lambda: NOW).cycle()
    assert (env / "job-998.env").exists()  # dry run changes nothing


def test_write_env_file_never_creates_the_spool_itself(tmp_path: Path) -> None:
    """Only `<spool>/sched` is made: a spool that does not exist is a wrong setting, not a directory to make."""
    import pytest

    with pytest.raises(FileNotFoundError):
        write_env_file(tmp_path / "no-spool" / "sched", "1", {"EASLURM_GPUS": "1"})
    assert not (tmp_path / "no-spool").exists()


def test_schedd_env_dir_from_a_missing_spool_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    """The default spool (/var/spool/easlurm) beside a local cluster: schedd stops with one line naming
    spank.spool and creates nothing; a configured sched.env_dir is made only under an existing directory."""
    import pytest

    from easlurm.errors import ConfigError
    from easlurm.priority.schedd_cli import scheduler_env_dir

    spool = tmp_path / "spool"
    with pytest.raises(ConfigError, match=r"^spank\.spool: .*spool does not exist") as exc:
        scheduler_env_dir(str(spool), None, dry_run=False)
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match=r"^sched\.env_dir: "):
        scheduler_env_dir(str(spool), str(tmp_path / "a" / "b"), dry_run=False)
    assert not spool.exists() and not (tmp_path / "a").exists()
    assert scheduler_env_dir(str(spool), None, dry_run=True) == spool / "sched"  # writes nothing
    spool.mkdir()
    assert scheduler_env_dir(str(spool), None, dry_run=False) == spool / "sched"
    assert scheduler_env_dir(str(spool), str(tmp_path / "hints"), dry_run=False) == tmp_path / "hints"
