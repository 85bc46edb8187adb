"""What a QUOTA wait is told would help, by the limit its reason names, and the parent team's
figures left out of reasons where quotas are private (both found by QA)."""

import pytest
from django.test import override_settings

from scheduling.cluster import policy_config
from scheduling.web.explanations import CEILING_HELP, NOTHING_IDLE_HELP, PARENT_QUOTA_HELP, QUOTA_HELP, quota_help


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (
            "team research-vision uses 24 H100 (guaranteed 8, borrowing limit reached at 24); this job needs 8 more",
            QUOTA_HELP,
        ),
        (
            "element 3: parent team research uses 16 H100 (guaranteed 8, borrowing limit reached at 16); this job"
            " needs 8 more",
            PARENT_QUOTA_HELP.format(parent="research"),
        ),
        ("parent team research has reached its borrowing limit of H100; this job needs 8 more", None),
        (
            "this job asks 56 H100, more than team research-vision may ever hold (48: guaranteed 16 plus its"
            " borrowing limit): it can start only once that quota is raised",
            CEILING_HELP.format(team="its team"),
        ),
        (
            "this job asks 24 H100, more than parent team research may ever hold: it can start only once that quota"
            " is raised",
            CEILING_HELP.format(team="team research"),
        ),
        ("team research-vision at 24/24 guaranteed H100, nothing idle to borrow (needs 8, 0 free)", NOTHING_IDLE_HELP),
    ],
)
def test_what_would_help_a_quota_wait_follows_the_limit_that_holds_it(message, said):
    """Every QUOTA wait was told a higher borrowing limit from a lead of its team would help,
    also where nothing was idle to borrow and where the limit was a parent team's."""
    assert quota_help(message) == (said or PARENT_QUOTA_HELP.format(parent="research"))


def test_the_live_policy_names_parent_figures_only_while_quotas_are_public():
    assert policy_config().parent_quota_figures is True
    with override_settings(MLQ_QUOTAS_PUBLIC=False):
        assert policy_config().parent_quota_figures is False
