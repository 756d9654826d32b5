"""easlurm's record beside what a site keeps in AdminComment (an operator's note): the rest of the value
survives byte for byte in either order, easlurm's part replaces only itself, the whole stays under
ADMIN_COMMENT_MAX_CHARS (never published past it), and sacctmgr (which lowercases values) never rewrites a
site's value. A value its reader base64-decodes to the end of the field (Princeton jobstats'
`JS1:<base64 gzip>`) takes nothing after it (Python >= 3.12's b64decode reads on past padding): easlurm
then writes nothing, and its record stays in the spool."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

import pytest

from easlurm.accounting.admin_codec import READABLE, SEPARATOR, AdminValue
from easlurm.accounting.publish import publish_from_spool, set_admin_comment
from easlurm.accounting.republish import _BASE64_CASE, _SITE_VALUE_CASE, _beside, _why_not_beside
from easlurm.accounting.spool import Spool, write_record
from easlurm.accounting.step_record import (
    ADMIN_COMMENT_MAX_CHARS,
    DeviceRecord,
    NodeRecord,
    StepRecord,
    decode_admin_comment,
    decode_admin_document,
    encode_admin_comment,
)
from easlurm.config import check_setting, load_config
from easlurm.errors import ConfigError, SlurmError


def step(name: str = "0", gpus: int = 2) -> StepRecord:
    rng = random.Random(name)  # readings that do not compress away
    devs = [
        DeviceRecord(f"gpu{i}", "gpu", rng.uniform(1e3, 9e3), rng.uniform(50, 300), 100, False, "nvml-energy")
        for i in range(gpus)
    ]
    node = NodeRecord(0, "a100-1", 1.7e9, 10.0, devs, 1.7e9 - 0.1, 1.7e9 + 10.0)
    return StepRecord(7, name, 1, [node], spec="all")


def jobstats_value(nodes: dict[str, Any]) -> str:
    """What jobstats' EpilogSlurmctld stores: JS1: and the base64 of the gzipped JSON summary."""
    return "JS1:" + base64.b64encode(gzip.compress(json.dumps({"nodes": nodes}).encode(), mtime=0)).decode()


def jobstats_reads(value: str) -> Any:
    """jobstats' own reader (jobstats.py): a value starting JS1:, base64 then gzip of the rest."""
    assert value.startswith("JS1:")
    return json.loads(gzip.decompress(base64.b64decode(value[4:])))["nodes"]


#: jobstats values whose base64 ends with no padding, one and two '=': easlurm writes nothing beside any
SITE_VALUES = [jobstats_value({"n" * k: {"cpus": k, "gpu_utilization": {"0": 91.5}}}) for k in range(1, 8)]
#: Other tag:base64 values a reader decodes to the end of the field
BASE64_VALUES = [
    *SITE_VALUES,
    "XY_2.v:" + base64.b64encode(bytes(range(40))).decode(),
    "t:" + base64.b64encode(b"abc").decode(),
]
#: Site values that are not tag:base64: easlurm's part goes after them
BESIDE_VALUES = [
    "site:owner=ops;keep=1",
    "note: GPU node under test, ask ops",
    "Rack 12 / row B (drained 2026-11-02)",
    "note:rack12",  # tag and base64 letters, but no encoder's length (a multiple of 4)
    "ab:cd:ef==",
]


def test_the_site_values_cover_every_base64_ending() -> None:
    assert {len(v) - len(v.rstrip("=")) for v in SITE_VALUES} == {0, 1, 2}


@pytest.mark.parametrize("site", BASE64_VALUES)
def test_a_base64_value_takes_nothing_after_it(site: str) -> None:
    current = AdminValue.split(site)
    assert not current.takes_a_part_after()
    assert current.base64_tag() == site.partition(":")[0]
    # one easlurm wrote after it before this rule: still left alone
    old = site + SEPARATOR + READABLE + encode_admin_comment([step()])
    assert not AdminValue.split(old).takes_a_part_after()


@pytest.mark.parametrize("site", BESIDE_VALUES)
def test_other_values_take_easlurm_part_after_them(site: str) -> None:
    assert AdminValue.split(site).takes_a_part_after() and AdminValue.split(site).base64_tag() is None
    assert AdminValue.split("").takes_a_part_after()
    # easlurm's part first, the site's value after it (whatever it is): easlurm's part is replaced in place
    assert AdminValue.split(READABLE + "easlurm2:aaaa" + SITE_VALUES[0]).takes_a_part_after()


@pytest.mark.parametrize("site", BASE64_VALUES)
def test_a_base64_value_is_left_byte_for_byte_and_nothing_written(
    site: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for finished in (False, True):
        ctld = Ctld(site, finished=finished)
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            assert not set_admin_comment(7, encode_admin_comment([step("0")]), ctld)
        assert ctld.held == site and ctld.writes == []
        if site.startswith("JS1:"):
            assert jobstats_reads(ctld.held) == jobstats_reads(site)
        tag = site.partition(":")[0]
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors == [
            f"job 7: not published: AdminComment holds {tag}: a base64 value its reader decodes to the end "
            "of the field (jobstats); easlurm's record stays in the spool (easlurm sacct reads it from "
            "there; spank.store: spool avoids AdminComment altogether)"
        ]
    ctld = Ctld(site)
    place = _spool_with_steps(tmp_path, 3)
    assert not publish_from_spool(place, ctld)
    assert ctld.held == site and ctld.writes == []
    assert len(list(place.job_dir.glob("step-*.json"))) == 3  # the records stay in the spool


@pytest.mark.parametrize("site", BESIDE_VALUES)
def test_a_site_value_before_survives_byte_for_byte(site: str) -> None:
    doc = encode_admin_comment([step("0"), step("batch")])
    value = AdminValue.split(site).merged(doc)
    assert value == site + SEPARATOR + READABLE + doc
    assert value.startswith(site)
    assert sorted(s.step for s in decode_admin_comment(value)) == ["0", "batch"]
    # published again (a later step): easlurm's part only is replaced, the site's value stays first
    doc2 = encode_admin_comment([step("0"), step("1"), step("batch")])
    again = AdminValue.split(value).merged(doc2)
    assert again == site + SEPARATOR + READABLE + doc2
    assert AdminValue.split(again).before == site and AdminValue.split(again).after == ""


@pytest.mark.parametrize("site", [SITE_VALUES[0], SITE_VALUES[1], ";note: GPU node under test, ask ops"])
def test_a_site_value_after_easlurm_survives_byte_for_byte(site: str) -> None:
    """A tool that added its value after easlurm's part: easlurm replaces its part in place."""
    first = READABLE + encode_admin_comment([step("0")])
    held = first + site
    assert AdminValue.split(held) == AdminValue("", first, site)
    doc = encode_admin_comment([step("0"), step("1")])
    value = AdminValue.split(held).merged(doc)
    assert value == READABLE + doc + site
    assert value.endswith(site)
    assert sorted(s.step for s in decode_admin_comment(value)) == ["0", "1"]


def test_alone_the_record_begins_with_the_readable_prefix() -> None:
    doc = encode_admin_comment([step()])
    for held in ("", "(null)", None, "easlurm2:aaaa", READABLE + "easlurm1:00ff"):
        assert AdminValue.split(held).merged(doc) == READABLE + doc
    assert READABLE.islower() and "|" not in READABLE and READABLE.isascii()


def test_what_sacctmgr_would_rewrite_is_told() -> None:
    assert not AdminValue.split(SITE_VALUES[0]).survives_sacctmgr()  # base64 has capitals
    assert not AdminValue.split('note "x"').survives_sacctmgr()
    assert AdminValue.split("site-note:rack-12").survives_sacctmgr()
    assert AdminValue.split("").survives_sacctmgr()


class Ctld:
    """slurmctld's AdminComment of one job as `scontrol show job`/`update` see it; `finished` makes
    update refuse as for a completing job, and `sacctmgr` lowercases as 22.05's does."""

    def __init__(self, held: str = "", finished: bool = False, readable: bool = True) -> None:
        self.held, self.finished, self.readable = held, finished, readable
        self.writes: list[tuple[str, str]] = []

    def show_job(self, job_id: int) -> dict[str, str]:
        if not self.readable:
            raise SlurmError("scontrol failed: Socket timed out")
        return {"JobId": str(job_id), "AdminComment": self.held}

    def set_admin_comment(self, job_id: int, text: str) -> None:
        if self.finished:
            raise SlurmError("scontrol failed: Job has already finished")
        self.held = text
        self.writes.append(("scontrol", text))

    def set_admin_comment_db(self, job_id: int, text: str) -> None:
        self.writes.append(("sacctmgr", text.lower()))


def test_publication_keeps_the_site_value() -> None:
    site = BESIDE_VALUES[2]
    ctld = Ctld(site)
    assert set_admin_comment(7, encode_admin_comment([step("0")]), ctld)
    assert set_admin_comment(7, encode_admin_comment([step("0"), step("1")]), ctld)
    assert ctld.held.startswith(site + SEPARATOR + READABLE)
    assert sorted(s.step for s in decode_admin_comment(ctld.held)) == ["0", "1"]
    assert AdminValue.split(ctld.held).before == site


def test_nothing_is_written_when_the_value_cannot_be_read(caplog: pytest.LogCaptureFixture) -> None:
    ctld = Ctld(SITE_VALUES[0], readable=False)
    with caplog.at_level(logging.ERROR):
        assert not set_admin_comment(7, encode_admin_comment([step()]), ctld)
    assert ctld.writes == []
    assert "cannot read AdminComment" in caplog.text and "spool keeps" in caplog.text


def test_a_finished_job_is_written_to_the_database_only_when_sacctmgr_keeps_the_site_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    doc = encode_admin_comment([step()])
    lower = Ctld("site-note:rack-12", finished=True)
    assert set_admin_comment(7, doc, lower)
    assert lower.writes == [("sacctmgr", "site-note:rack-12" + SEPARATOR.lower() + READABLE + doc)]
    assert decode_admin_comment(lower.writes[0][1])  # the lowercased separator is still found
    upper = Ctld(BESIDE_VALUES[2], finished=True)
    with caplog.at_level(logging.ERROR):
        assert not set_admin_comment(7, doc, upper)
    assert upper.writes == [] and "sacctmgr would lowercase" in caplog.text


def test_never_past_the_size_cap(caplog: pytest.LogCaptureFixture) -> None:
    """A site value that leaves too little room: nothing is published, and nothing truncated."""
    huge = "x" * (ADMIN_COMMENT_MAX_CHARS - 100)
    ctld = Ctld(huge)
    with caplog.at_level(logging.ERROR):
        assert not set_admin_comment(7, encode_admin_comment([step()]), ctld)
    assert ctld.held == huge and ctld.writes == [] and "at most 60000" in caplog.text


def _spool_with_steps(tmp_path: Path, n: int) -> Any:
    spool = Spool(tmp_path / "spool")
    place = type("Place", (), {})()
    place.job_id, place.nnodes, place.spec, place.restart, place.gid = 7, 1, "all", 0, os.getgid()
    place.job_dir = spool.job_dir(7)
    place.job_dir.mkdir(parents=True)
    for i in range(n):
        write_record(spool.step_file(7, str(i)), step(str(i), gpus=8).to_dict(), os.getgid())
    place.step = str(n - 1)
    place.step_file = spool.step_file(7, place.step)
    place.manifest_file = spool.manifest_file(7)
    return place


def test_a_publication_leaves_the_site_value_its_room(tmp_path: Path) -> None:
    """The document is sized to what the site value leaves: the whole stays under the cap, the site's
    value is kept whole, and easlurm's part still carries every step (fewer in detail)."""
    alone = Ctld()
    assert publish_from_spool(_spool_with_steps(tmp_path / "alone", 100), alone)
    site = "n" * (ADMIN_COMMENT_MAX_CHARS - len(alone.held) // 2)
    ctld = Ctld(site)
    assert publish_from_spool(_spool_with_steps(tmp_path, 100), ctld)
    assert len(ctld.held) <= ADMIN_COMMENT_MAX_CHARS
    assert ctld.held.startswith(site + SEPARATOR + READABLE)
    assert len(ctld.held) - len(site) < len(alone.held) // 2 + 1  # reduced to fit beside it
    carried = decode_admin_document(ctld.held)
    assert len(carried.steps) + len(carried.omitted) == 100  # every step, fewer in detail


def test_republish_writes_beside_what_the_database_holds() -> None:
    steps = [step("0"), step("batch")]
    value = _beside("site-note:rack-12;" + READABLE + "easlurm2:aaaa", steps)
    assert value is not None and value.startswith("site-note:rack-12;" + READABLE + "easlurm2:")
    assert sorted(s.step for s in decode_admin_comment(value)) == ["0", "batch"]
    assert _beside(BESIDE_VALUES[2], steps) is None  # sacctmgr would lowercase the site's capitals
    assert _why_not_beside(BESIDE_VALUES[2]) == _SITE_VALUE_CASE
    assert _beside(SITE_VALUES[0], steps) is None and _why_not_beside(SITE_VALUES[0]) == _BASE64_CASE
    lower = "js1:" + "abcd" * 8  # base64 that sacctmgr would not rewrite
    assert base64.b64decode(lower[4:]) and _why_not_beside(lower) == _BASE64_CASE


def test_the_store_setting_is_checked() -> None:
    """spank.store: admin_comment (default) or spool; anything else is one line naming the setting."""
    assert check_setting("spank.store", "spool", "x") == "spool"
    assert load_config(None).get("spank.store") == "admin_comment"
    with pytest.raises(ConfigError, match=r"^spank.store: must be one of admin_comment, spool, got 'db'$"):
        check_setting("spank.store", "db", "spank.store")
