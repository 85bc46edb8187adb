"""The web UI of job groups (issue 16): the queue's one expandable row per group, the parent's
page (counts, children, one cancel), a sweep's ranking, chart and best parameters, a child's
link to its group, and the queue API's entries."""

import json
import re

from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import Job, JobMetric
from scheduling.queue_state import QUEUE_ORDER_KEY
from scheduling.web.group_page import CHART_POINTS, metric_curves
from scheduling.web.queue import index_ranges
from tests.integration.test_groups import children, submit
from tests.integration.test_pipelines import steps, submit_pipeline

GRID = {
    "method": "grid",
    # Trials by name, batch_size slowest: (64, 0.01), (64, 0.001), (32, 0.01), (32, 0.001).
    "parameters": {"lr": [0.01, 0.001], "batch_size": [64, 32]},
    "parallelism": 2,
    "metric": {"name": "val_loss", "goal": "minimize"},
}


def page(client, path: str) -> tuple[str, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.content.decode(), len(queries.captured_queries)


def row_of(html: str, job_id: int) -> str:
    match = re.search(rf'<tr id="job-{job_id}".*?</tr>', html, re.S)
    assert match, f"no row for job {job_id}"
    return match[0]


def report(job: Job, values: list[float], name: str = "val_loss") -> None:
    """What the agent's ingest stores: one row per report line, steps 1, 2, ..."""
    JobMetric.objects.bulk_create(
        JobMetric(job=job, rank=0, attempt=1, seq=seq, step=seq, name=name, value=value)
        for seq, value in enumerate(values, start=1)
    )


def test_index_ranges_are_squeue_s_compact_form():
    assert index_ranges([5, 6, 7, 9, 12, 13]) == "5-7,9,12-13"
    assert index_ranges([3]) == "3"
    assert index_ranges(list(range(0, 40, 2))) == "0,2,4,6,8,10,…"


def test_the_queue_shows_a_group_as_one_row_with_its_pending_range_counts_and_best_position(api, logged_in):
    parent = submit(api, array={"count": 6, "parallelism": 2})
    kids = children(parent)
    Job.objects.filter(pk__in=[kids[0].pk, kids[1].pk]).update(state="RUNNING")
    Job.objects.filter(pk=kids[2].pk).update(state="SUCCEEDED")
    plain = submit(api, name="plain")
    cache.set(QUEUE_ORDER_KEY, [plain.pk, kids[4].pk, kids[3].pk, kids[5].pk])

    html, _ = page(logged_in("alice"), "/queue/")
    row = row_of(html, parent.pk)
    assert f'<code class="small pending-range">{parent.pk}_[3-5]</code>' in row
    assert re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", row_of(html, parent.pk))).count(
        "6 elements: 3 pending · 2 running · 1 done · 0 failed"
    )
    assert "at most 2 at once" in row
    assert '<td class="muted" title="the best place in line of its pending elements">2</td>' in row
    assert not any(f'id="job-{kid.pk}"' in html for kid in kids)  # children only under the row
    assert html.index(f'id="job-{plain.pk}"') < html.index(f'id="job-{parent.pk}"')  # sorted by place in line

    fragment, _ = page(logged_in("alice"), f"/queue/groups/{parent.pk}/")
    ids = [int(found) for found in re.findall(r'<tr id="job-(\d+)"', fragment)]
    assert ids == [kids[4].pk, kids[3].pk, kids[5].pk, kids[0].pk, kids[1].pk, kids[2].pk]


def test_a_sweep_s_row_names_its_pending_trials(api, logged_in):
    parent = submit(api, sweep=GRID, command=["python", "train.py", "--lr", "{lr}"])
    Job.objects.filter(pk=children(parent)[0].pk).update(state="RUNNING")
    html, _ = page(logged_in("alice"), "/queue/")
    assert '<code class="small pending-range">trials 1-3</code>' in row_of(html, parent.pk)


def test_the_queue_page_s_queries_do_not_grow_with_groups_or_children(api, logged_in):
    submit(api, array={"count": 3})
    client = logged_in("alice")
    _, few = page(client, "/queue/")
    _, few_fragment = page(client, "/queue/?state=all")
    for _ in range(3):
        submit(api, array={"count": 12})
    submit(api, sweep=GRID)
    _, many = page(client, "/queue/")
    _, many_fragment = page(client, "/queue/?state=all")
    assert (many, many_fragment) == (few, few_fragment)


def test_a_group_s_children_fragment_is_bounded_in_queries(api, logged_in):
    client = logged_in("alice")
    small = submit(api, array={"count": 2})
    big = submit(api, array={"count": 30})
    _, few = page(client, f"/queue/groups/{small.pk}/")
    _, many = page(client, f"/queue/groups/{big.pk}/")
    assert many == few


def test_who_cannot_see_a_group_gets_404_for_its_page_and_its_rows(api, logged_in):
    parent = submit(api, array={"count": 2})
    victor = logged_in("victor")
    assert victor.get(f"/jobs/{parent.pk}/").status_code == 404
    assert victor.get(f"/queue/groups/{parent.pk}/").status_code == 404
    assert victor.get(f"/jobs/{children(parent)[0].pk}/").status_code == 404
    plain = submit(api, name="plain")
    assert logged_in("alice").get(f"/queue/groups/{plain.pk}/").status_code == 404  # not a group


def test_an_array_s_page_lists_its_children_and_counts_and_a_child_links_to_it(api, logged_in):
    parent = submit(api, array={"count": 4, "parallelism": 2, "max_failures": 1})
    kids = children(parent)
    Job.objects.filter(pk=kids[1].pk).update(state="FAILED", failure_class="APP", retries_used=2)
    client = logged_in("alice")
    html, _ = page(client, f"/jobs/{parent.pk}/")
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))
    assert "Array of 4 elements" in text
    assert "3 pending · 0 running · 0 succeeded · 1 failed · 0 cancelled" in text
    assert "at most 2 elements on nodes at once" in text
    assert "1: it fails when more than 1 fail for good" in text
    assert [int(i) for i in re.findall(r'<tr id="child-(\d+)"', html)] == [kid.pk for kid in kids]
    assert "Cancel the array (3 unfinished)" in html
    assert html.count(f'action="/jobs/{parent.pk}/cancel/"') == 1  # one cancel, the group's

    child_html, _ = page(client, f"/jobs/{kids[2].pk}/")
    assert f'Element 2 of array\n  <a href="/jobs/{parent.pk}/">{parent.pk}</a>' in child_html


def test_cancelling_a_group_from_its_page_cancels_every_unfinished_child(api, logged_in):
    parent = submit(api, array={"count": 3})
    kids = children(parent)
    Job.objects.filter(pk=kids[0].pk).update(state="SUCCEEDED")
    response = logged_in("alice").post(f"/jobs/{parent.pk}/cancel/", {"reason": "wrong data"})
    assert response.status_code == 302
    assert [kid.state for kid in children(parent)] == ["SUCCEEDED", "CANCELLED", "CANCELLED"]


def test_a_sweep_s_page_ranks_trials_charts_them_and_names_the_best_parameters(api, logged_in):
    parent = submit(api, sweep=GRID, command=["python", "train.py", "--lr", "{lr}"])
    kids = children(parent)  # trials 0..3: lr x batch_size
    report(kids[0], [0.9, 0.7, 0.6])
    report(kids[1], [0.8, 0.4, 0.5])
    report(kids[2], [1.2, 1.1])
    Job.objects.filter(pk=kids[2].pk).update(state="EARLY_STOPPED", failure_class="EARLY_STOPPED")
    html, _ = page(logged_in("alice"), f"/jobs/{parent.pk}/")

    ranked = [int(i) for i in re.findall(r'<tr id="child-(\d+)"', html)]
    assert ranked == [kids[1].pk, kids[0].pk, kids[2].pk, kids[3].pk]
    best = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", re.search(r'<p id="best-trial".*?</p>', html, re.S)[0]))
    assert kids[1].params == {"lr": 0.001, "batch_size": 64}
    assert best == f"Best so far: trial 1 (job {kids[1].pk}), val_loss 0.4 at step 2, with lr=0.001, batch_size=64."
    stopped = row_of(html.replace('<tr id="child-', '<tr id="job-'), kids[2].pk)
    assert "stopped early" in stopped
    chart = json.loads(
        re.search(r'<script id="sweep-chart-data" type="application/json">(.*?)</script>', html, re.S)[1]
    )
    assert chart["metric"] == "val_loss"
    assert [(s["job"], s["rank"], s["stopped"]) for s in chart["series"]] == [
        (kids[1].pk, 1, False),
        (kids[0].pk, 2, False),
        (kids[2].pk, 3, True),
    ]
    assert chart["series"][0]["points"] == [[1, 0.8], [2, 0.4], [3, 0.5]]


def test_a_trial_s_curve_on_the_chart_is_thinned_to_a_bound_keeping_its_last_report(api):
    parent = submit(api, sweep=GRID)
    trial = children(parent)[0]
    report(trial, [float(n) for n in range(1, 1001)])
    points = metric_curves([trial.pk], "val_loss")[trial.pk]
    # 1000 reports, CHART_POINTS 200: every 6th (1000 // 200 + 1), counted back from the last.
    assert CHART_POINTS == 200
    assert points == [[step, float(step)] for step in range(4, 1001, 6)]
    assert len(points) == 167


def test_the_queue_api_lists_a_group_s_children_not_its_parent(api):
    parent = submit(api, array={"count": 3})
    kids = children(parent)
    cache.set(QUEUE_ORDER_KEY, [kids[2].pk, kids[0].pk])
    entries = api("alice").get("/api/v1/queue").json()["results"]
    assert [(e["id"], e["position"], e["parent"], e["array_index"]) for e in entries] == [
        (kids[2].pk, 1, parent.pk, 2),
        (kids[0].pk, 2, parent.pk, 0),
        (kids[1].pk, None, parent.pk, 1),
    ]


def test_a_group_s_page_reads_in_queries_that_do_not_grow_with_its_children(api, logged_in):
    client = logged_in("alice")
    small = submit(api, sweep=GRID)
    big = submit(api, sweep={**GRID, "parameters": {"lr": [0.001, 0.01, 0.1], "batch_size": [8, 16, 32, 64, 128]}})
    for parent in (small, big):
        for kid in children(parent):
            report(kid, [1.0, 0.5])
    small_html, few = page(client, f"/jobs/{small.pk}/")
    big_html, many = page(client, f"/jobs/{big.pk}/")
    assert (big_html.count('<tr id="child-'), small_html.count('<tr id="child-')) == (15, 4)
    assert many == few
    assert "<h2>Logs</h2>" not in big_html and ">Tasks</h2>" not in big_html  # a parent runs nothing itself


def test_the_group_section_alone_is_served_for_its_live_refresh(api, logged_in):
    parent = submit(api, sweep=GRID)
    kids = children(parent)
    report(kids[2], [0.3])
    html, _ = page(logged_in("alice"), f"/jobs/{parent.pk}/group/")
    assert html.count('<div class="panel" id="group"') == 1
    assert f'data-live-children="{kids[2].pk},{kids[0].pk},{kids[1].pk},{kids[3].pk}"' in html
    assert "chart-4.6.1.umd.min.js" in html  # a full render loads Chart.js ...
    fragment = logged_in("alice").get(f"/jobs/{parent.pk}/group/", HTTP_HX_REQUEST="true").content.decode()
    assert "chart-4.6.1.umd.min.js" not in fragment  # ... a refresh does not load it again
    assert 'id="sweep-chart-data"' in fragment
    assert logged_in("victor").get(f"/jobs/{parent.pk}/group/").status_code == 404


def test_a_pipelines_row_counts_steps_skipped_included_without_a_parallelism(api, logged_in):
    parent = submit_pipeline(api)
    made = steps(parent)
    first, *rest = made.values()
    Job.objects.filter(pk=first.pk).update(state="SUCCEEDED")
    Job.objects.filter(pk=rest[-1].pk).update(state="SKIPPED")
    html, _ = page(logged_in("bob"), "/queue/?state=all")  # bob's team's pipeline
    row = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", row_of(html, parent.pk)))
    assert f"{len(made)} steps: " in row and "1 skipped" in row and "trials" not in row
    assert "at most" not in row and "per step" in row  # no parallelism; each step asks for its own


def test_the_queue_pager_keeps_one_page_parameter_and_works_without_javascript(api, logged_in, monkeypatch):
    monkeypatch.setattr("scheduling.web.queue.PAGE_SIZE", 2)
    for _ in range(5):
        submit(api, name="paged")
    html, _ = page(logged_in("alice"), "/queue/?sort=priority&page=2&team=research-foundation-models&page=2")
    links = re.findall(r'<a hx-get="([^"]+)"[^>]*href="([^"]+)"', html)
    assert len(links) == 2  # previous and next
    for hx_get, href in links:
        assert hx_get == href  # a plain link too: the page without JavaScript
        assert href.count("page=") == 1, href  # it grew a page= at every click
    assert "← previous" in html and "next →" in html
    assert '<noscript><button type="submit">Filter</button></noscript>' in html  # the filters submit without it
