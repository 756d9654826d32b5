"""The framing of easlurm's AdminComment documents (dicts in, text out): versions, compact records, key ranges.

`easlurm1:<lowercase hex of zlib(JSON)>` (read only) and `easlurm2:<lowercase base32 of zlib(JSON)>`
(written): both only [0-9a-z:], ASCII, no `|`, newline or quote, so they survive `scontrol update`,
`sacct -P` and `sacctmgr` (which lowercases values and turns quotes into backticks). Version 2 also
leaves out of each record what a reader recomputes (derived totals) or defaults (None, empty lists).
The records themselves are easlurm.accounting.step_record's; this module knows only their dict form.

easlurm's part of the field never replaces what else it holds (a site's own value, an operator's note):
AdminValue keeps the rest byte for byte and puts easlurm's part after it, behind READABLE
(`energy:easlurm-sacct;`: where a plain-sacct reader finds the energy). A value its reader base64-decodes
to the end of the field (Princeton jobstats' `JS1:<base64>`) takes nothing after it: easlurm then leaves
the field alone (AdminValue.takes_a_part_after).
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

from easlurm.errors import TraceError
from easlurm.inputs import inflate

PREFIX_V1 = "easlurm1:"
PREFIX_V2 = "easlurm2:"
#: Both versions' prefixes: a value starting with one holds an easlurm document.
PREFIXES = (PREFIX_V1, PREFIX_V2)
_TOKEN = re.compile(r"easlurm([12]):([0-9a-z]+)")
#: A step record's keys that StepRecord.from_dict recomputes from its nodes (never trusted on read).
_STEP_DERIVED = frozenset(
    {
        "partial",
        "duration_s",
        "total_energy_j",
        "gpu_energy_j",
        "cpu_energy_j",
        "dram_energy_j",
        "mean_power_w",
        "edp_j_s",
        "modelled",
        "no_sensor",
        "apportioned",
        "power_limit_w",
        "schema_version",
    }
)
_NODE_DERIVED = frozenset({"total_energy_j", "schema_version"})
#: Keys the readers require even when their value is None or empty.
_REQUIRED = frozenset({"job_id", "step", "nnodes", "node_id", "host", "name", "kind", "energy_j"})
#: The most step keys one range of a document may stand for (a damaged "0-999999999" is refused).
MAX_RANGE_KEYS = 1_000_000
#: What easlurm's part of an AdminComment begins with: a plain `sacct -o AdminComment` reader sees where
#: the energy is (`easlurm sacct`). Lowercase, so it survives sacctmgr; readers find the document after it.
READABLE = "energy:easlurm-sacct;"
#: Between a site's value and easlurm's part after it (the format values written earlier hold, still
#: parsed). It protects no base64 reader: Python >= 3.12's b64decode reads on past padding and skips
#: characters outside the alphabet, so nothing may follow a value read that way (_TAGGED_BASE64).
SEPARATOR = ";AA==;"
#: A site value that is a short tag and a base64 payload running to the end of the field (jobstats'
#: `JS1:<base64 of gzip>`): its reader decodes everything after the tag, so easlurm puts nothing after it.
#: (The payload's length is a multiple of 4, as an encoder writes it: `note:rack12` is no such value.)
_TAGGED_BASE64 = re.compile(r"([A-Za-z0-9_.-]{1,16}):([A-Za-z0-9+/]+={0,2})")
#: easlurm's part of a value, as written now (SEPARATOR and READABLE) or before (a bare document);
#: the lowercase separator is sacctmgr's rewriting of it.
_PART = re.compile(r"(?:;(?:AA|aa)==;)?(?:energy:easlurm-sacct;)?easlurm[12]:[0-9a-z]*")


def _lean(d: dict[str, Any], derived: frozenset[str]) -> dict[str, Any]:
    return {
        k: v
        for k, v in d.items()
        if k not in derived and (k in _REQUIRED or (v is not None and v != [] and v != {} and v != ""))
    }


def compact_step(step: dict[str, Any]) -> dict[str, Any]:
    """A StepRecord.to_dict() without derived totals and defaulted values (StepRecord.from_dict reads it
    back after `full_step`)."""
    out = _lean(step, _STEP_DERIVED)
    out["nodes"] = [
        {**_lean(n, _NODE_DERIVED), "devices": [_lean(d, frozenset()) for d in n.get("devices", [])]}
        for n in step.get("nodes", [])
    ]
    return out


def full_step(step: Any, schema_version: int) -> Any:
    """A compact step dict made acceptable to StepRecord.from_dict (which checks the schema version)."""
    if not isinstance(step, dict):
        raise TraceError("AdminComment: damaged easlurm record (a step is not an object)")
    return {**step, "schema_version": schema_version}


def pack(doc: dict[str, Any]) -> str:
    """A version-2 document as AdminComment text."""
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False).encode("ascii")
    return PREFIX_V2 + base64.b32encode(zlib.compress(raw, 6)).decode("ascii").rstrip("=").lower()


def pack_v1(doc: dict[str, Any]) -> str:
    """A version-1 document as the easlurm releases before version 2 wrote it (tests of old records)."""
    raw = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False).encode("ascii")
    return PREFIX_V1 + zlib.compress(raw, 9).hex()


def unpack(text: str | None) -> dict[str, Any] | None:
    """The document in an AdminComment value (None when it holds none), either version; raises
    TraceError when one is present but damaged (truncated by the database, say)."""
    if not text:
        return None
    # as written (a site's value beside it keeps its case, so the document ends where it does), else
    # as sacctmgr may have rewritten it
    m = _TOKEN.search(text) or _TOKEN.search(text.lower())
    if m is None:
        return None
    version, body = m.group(1), m.group(2)
    try:
        if version == "1":
            raw = bytes.fromhex(body[: len(body) // 2 * 2])
        else:
            raw = base64.b32decode(body.upper() + "=" * (-len(body) % 8))
        doc = json.loads(inflate(raw, "AdminComment: damaged easlurm record", TraceError))
    except ValueError as exc:  # binascii.Error and JSONDecodeError are ValueErrors
        raise TraceError(f"AdminComment: damaged easlurm record ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("v") != int(version):
        raise TraceError("AdminComment: unsupported easlurm record version")
    return doc


def key_ranges(keys: list[str]) -> list[str]:
    """Step keys of one job as short items: runs of numbered steps as `a-b` (with `+r<run>` after
    each end in later runs), other keys as they are."""
    numbered: dict[str, list[int]] = {}
    out: list[str] = []
    for key in keys:
        step, plus, run = key.partition("+r")
        if step.isdigit():
            numbered.setdefault(plus + run, []).append(int(step))
        else:
            out.append(key)
    for suffix, nums in numbered.items():
        nums.sort()
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            out.append(f"{start}{suffix}" if start == prev else f"{start}{suffix}-{prev}{suffix}")
            if n is not None:
                start = prev = n
    return out


def expand_ranges(items: Any) -> list[str]:
    """Inverse of key_ranges; raises TraceError on a damaged list."""
    if not isinstance(items, list):
        raise TraceError("AdminComment: damaged easlurm record (omitted steps)")
    out: list[str] = []
    for item in items:
        first, dash, last = str(item).partition("-")
        if not dash:
            out.append(first)
            continue
        a, _, suffix = first.partition("+r")
        b, _, suffix_b = last.partition("+r")
        if not (a.isdigit() and b.isdigit()) or suffix != suffix_b or int(b) - int(a) > MAX_RANGE_KEYS:
            raise TraceError(f"AdminComment: damaged easlurm record (omitted steps {item!r})")
        tail = f"+r{suffix}" if suffix else ""
        out.extend(f"{n}{tail}" for n in range(int(a), int(b) + 1))
        if len(out) > MAX_RANGE_KEYS:
            raise TraceError("AdminComment: damaged easlurm record (too many omitted steps)")
    return out


@dataclass(frozen=True)
class AdminValue:
    """An AdminComment value split around easlurm's part: what a site or another tool keeps there
    (`before` and `after`, byte for byte) and easlurm's part (None when it holds none)."""

    before: str
    ours: str | None
    after: str

    @classmethod
    def split(cls, text: str | None) -> AdminValue:
        """`text` as slurmctld or sacct shows it; "(null)" (scontrol's empty) is empty."""
        text = "" if text in (None, "(null)") else str(text)
        m = _PART.search(text)
        if m is None:
            return cls(text, None, "")
        return cls(text[: m.start()], m.group(0), text[m.end() :])

    @property
    def foreign(self) -> str:
        """Everything that is not easlurm's (empty when easlurm has the field alone)."""
        return self.before + self.after

    def base64_tag(self) -> str | None:
        """The tag of a site value that a reader base64-decodes to the end of the field (`JS1` for
        jobstats' summary), None for any other value."""
        m = _TAGGED_BASE64.fullmatch(self.before)
        return m.group(1) if m and len(m.group(2)) % 4 == 0 else None

    def takes_a_part_after(self) -> bool:
        """Whether easlurm's part may go after the site's value: not after one a reader base64-decodes to
        the end of the field (everything easlurm writes is in the base64 alphabet, so it would decode
        with it and break it)."""
        return self.base64_tag() is None

    def overhead(self) -> int:
        """Characters the rest of the value takes beside a new document (READABLE included)."""
        return len(self.foreign) + (len(SEPARATOR) if self.before else 0) + len(READABLE)

    def merged(self, document: str) -> str:
        """The value with `document` (pack's text) as easlurm's part: in its old part's place (behind the
        separator it had, if any), else after the rest, behind SEPARATOR; the rest unchanged."""
        part = READABLE + document
        if self.ours is not None:
            lead = self.ours[: len(SEPARATOR)]
            return self.before + (lead if lead.lower() == SEPARATOR.lower() else "") + part + self.after
        return (self.before + SEPARATOR if self.before else "") + part + self.after

    def survives_sacctmgr(self) -> bool:
        """Whether the rest comes through `sacctmgr modify job` unchanged (it lowercases the value and
        turns quotes into backticks): only then may easlurm write the whole value there."""
        rest = self.foreign
        return rest == rest.lower() and not any(c in rest for c in "\"'`")
