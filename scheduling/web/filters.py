import django_filters

from scheduling.models import Job, JobState, Priority


class JobFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__name")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    priority = django_filters.MultipleChoiceFilter(choices=Priority.choices)
    owner = django_filters.CharFilter(field_name="owner__username")

    class Meta:
        model = Job
        fields = ["team", "state", "priority", "owner"]
