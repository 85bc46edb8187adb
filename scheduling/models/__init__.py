"""The scheduling app's models, one module per concern; every name is imported from here.

- cluster.py: nodes, jobs, their tasks (ranks), logs and metrics, dependencies, start forecasts,
  and the leader lease;
- schedules.py: schedules and their fires;
- usage.py: the usage ledger, its rollups and prices;
- operations.py: quota what-ifs and maintenance windows.
"""

# TaskState and JobState are declared with their named sets; imported from here as before.
from scheduling.models.cluster import (  # noqa: F401
    HEALTH_STATES,
    ON_NODE,
    QUEUED_OR_RUNNING,
    UNSUCCESSFUL,
    AdminState,
    DependencyCondition,
    FailureClass,
    GroupKind,
    Job,
    JobDependency,
    JobMetric,
    JobState,
    Node,
    NodeState,
    PendingReasonCode,
    Priority,
    RestartMode,
    SchedulerLease,
    Signal,
    StartForecast,
    StopReason,
    Task,
    TaskIsolation,
    TaskLog,
    TaskState,
    TopologyHint,
    held_message,
)
from scheduling.models.operations import (  # noqa: F401
    MaintenanceState,
    MaintenanceWindow,
    PreviewState,
    QuotaPreview,
)
from scheduling.models.schedules import (  # noqa: F401
    Concurrency,
    FireOutcome,
    Schedule,
    ScheduleFire,
)
from scheduling.models.usage import (  # noqa: F401
    ROLLUP_KEY,
    USAGE_DAY_KEY,
    USAGE_WAIT_DAY_KEY,
    LostCause,
    Price,
    UsageDay,
    UsageRecord,
    UsageRollupKey,
    UsageWaitDay,
    UsageWaits,
    UsageWaitWeek,
)
