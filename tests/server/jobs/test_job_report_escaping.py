"""The job page escapes every text the job store holds: a job id, a site
name, an abort reason or an event detail containing markup is shown as text,
never run in the operator's browser."""

from __future__ import annotations

from html.parser import HTMLParser

from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.report import render_job_report

SCRIPT = '<script>alert("x")</script>'


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _hostile_job() -> tuple[pb.JobLog, dict]:
    status = pb.JobStatus(job_id=f"job-{SCRIPT}", algorithm=f"noisy_gd{SCRIPT}",
                          message=f"failed {SCRIPT}")
    status.rounds.add(round=1, participants=[f"site-{SCRIPT}"], epsilon_so_far=0.5)
    status.rounds.add(round=2, participants=["site-a"], aborted=True,
                      abort_reason=f"dropped {SCRIPT}")
    log = pb.JobLog(status=status)
    log.events.add(event=f"job_launched{SCRIPT}", site_name=f"site-{SCRIPT}",
                   detail=f"detail {SCRIPT}")
    site = {"job_epsilon": 0.5, "delta": 1e-5, "method": f"pld{SCRIPT}", "total_epsilon": 1.0,
            "total_delta": 1e-5, "cap_epsilon": 3.0, "releases": 1,
            "releases_seen_by_coordinator": 0}
    report = {"target": {"epsilon": 1.0, "delta": 1e-6}, "schema_digest": f"d{SCRIPT}",
              "sites": {f"site-{SCRIPT}": site}, "sites_not_reporting": [f"late-{SCRIPT}"]}
    return log, report


def test_a_job_id_with_a_script_tag_is_shown_as_text():
    log, report = _hostile_job()
    text = render_job_report(log, report)
    parsed = _Tags()
    parsed.feed(text)
    assert "<script>" not in text and "script" not in parsed.tags
    words = "".join(parsed.text)
    assert f"Privacy report of job job-{SCRIPT}" in words
    for shown in (f"failed {SCRIPT}", f"dropped {SCRIPT}", f"detail {SCRIPT}",
                  f"Did not report: late-{SCRIPT}."):
        assert shown in words


def test_a_site_name_with_a_script_tag_is_escaped_in_its_attribute_too():
    log, report = _hostile_job()
    text = render_job_report(log, report)
    assert 'data-site="site-&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"' in text
