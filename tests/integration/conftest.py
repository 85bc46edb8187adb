"""Fixtures the integration tests share."""

import pytest
from django.utils import timezone

from scheduling.models import SchedulerLease
from tests.nodes import heartbeat

EPOCH = 7


@pytest.fixture
def leader(demo):
    """The lease at EPOCH, and the demo fleet's nodes READY (their agents heartbeated)."""
    SchedulerLease.objects.filter(pk=1).update(epoch=EPOCH, holder="test:1", renewed_at=timezone.now())
    heartbeat()
    return EPOCH
