"""The node health rules: what a health sample from an agent calls for. Pure (no Django, no
clock): a sample and what was acted on before in, findings and what is acted on now out.

A sample repeats a fault in every heartbeat until the machine is repaired, so each fault is
acted on once, remembered in `marks` (kept on the node, Node.health_marks):
- an XID is an event with a time: the latest one acted on is `xid_at`;
- an uncorrectable ECC count only grows while the driver is loaded: `ecc` keeps each GPU's;
- a failing health check is a run of failures: `check` keeps the start of the run acted on.
An admin who uncordons a node whose fault is still reported is not overruled; a new fault
(a later XID, more ECC errors, a new run of check failures) acts again."""

import unicodedata
from dataclasses import dataclass, field

from mlqueue.text import INVISIBLE_CATEGORIES

CORDON, EXCLUDE = "cordon", "exclude"
XID_NAMES = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


@dataclass(frozen=True)
class Finding:
    """What one fault calls for: cordon the node, or exclude one GPU (`gpu`)."""

    action: str
    reason: str
    gpu: int | None = None


@dataclass(frozen=True)
class Rules:
    cordon_xids: frozenset[int]
    exclude_xids: frozenset[int]


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)
    marks: dict = field(default_factory=dict)

    @property
    def cordon(self) -> list[Finding]:
        return [f for f in self.findings if f.action == CORDON]

    @property
    def excluded(self) -> dict[int, str]:
        """GPU index -> why, the first reason of each GPU (a GPU of a cordoned node too)."""
        found: dict[int, str] = {}
        for finding in self.findings:
            if finding.action == EXCLUDE:
                found.setdefault(finding.gpu, finding.reason)
        return found


def xid_text(code: int) -> str:
    name = XID_NAMES.get(code)
    return f"XID {code} ({name})" if name else f"XID {code}"


def has_fault(sample: dict, rules: Rules) -> bool:
    """Whether the sample reports anything a rule acts on: the common sample, a healthy one,
    is told apart without reading the node's marks."""
    check = sample.get("check")
    if check and check["status"] == "failed":
        return True
    acted = rules.cordon_xids | rules.exclude_xids
    return any(gpu.get("ecc_uncorrectable") or any(x["code"] in acted for x in gpu["xids"]) for gpu in sample["gpus"])


def judge(sample: dict, marks: dict, rules: Rules) -> Verdict:
    """The findings a sample calls for that `marks` has not acted on, and the marks after them.
    Order: the health check, then GPUs by index (XIDs by time, then ECC)."""
    verdict = Verdict(marks={**marks, "ecc": dict(marks.get("ecc", {}))})
    _judge_check(sample.get("check"), verdict)
    for gpu in sorted(sample["gpus"], key=lambda g: g["index"]):
        _judge_xids(gpu, marks.get("xid_at", 0.0), rules, verdict)
        _judge_ecc(gpu, verdict)
    return verdict


def _judge_check(check: dict | None, verdict: Verdict) -> None:
    if not check or check["status"] != "failed":
        return
    since = check.get("failed_since") or check["at"]
    if since == verdict.marks.get("check"):
        return
    verdict.marks["check"] = since
    code = "" if check.get("exit_code") is None else f" (exit {check['exit_code']})"
    shown = " ".join(_readable(check.get("output") or "").split())  # a node's log line, read by people
    output = f": {shown}" if shown else ""
    verdict.findings.append(Finding(CORDON, f"health check failed{code}{output}"))


def _judge_xids(gpu: dict, acted_until: float, rules: Rules, verdict: Verdict) -> None:
    for xid in sorted(gpu["xids"], key=lambda x: x["at"]):
        if xid["at"] <= acted_until:
            continue
        if xid["code"] in rules.cordon_xids:
            verdict.findings.append(Finding(CORDON, f"{xid_text(xid['code'])} on GPU {gpu['index']}", gpu["index"]))
        elif xid["code"] in rules.exclude_xids:
            verdict.findings.append(Finding(EXCLUDE, f"{xid_text(xid['code'])}", gpu["index"]))
        else:
            continue  # reported and shown, not acted on
        verdict.marks["xid_at"] = max(verdict.marks.get("xid_at", 0.0), xid["at"])


def _judge_ecc(gpu: dict, verdict: Verdict) -> None:
    count, key = gpu.get("ecc_uncorrectable") or 0, str(gpu["index"])
    acted = verdict.marks["ecc"].get(key, 0)
    if count < acted:  # the driver was reloaded: the count starts again
        verdict.marks["ecc"][key] = count
    if count <= acted:
        return
    verdict.marks["ecc"][key] = count
    verdict.findings.append(Finding(EXCLUDE, f"{count} uncorrectable ECC error(s)", gpu["index"]))


def _readable(text: str) -> str:
    """The text with control and invisible characters (an escape sequence, a right-to-left
    override) made spaces: it goes into the node's reason, which consoles and terminals show."""
    return "".join(" " if unicodedata.category(char) in INVISIBLE_CATEGORIES else char for char in text)
