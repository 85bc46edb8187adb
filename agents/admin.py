from django.contrib import admin

from agents.models import Node


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "zone", "rack", "gpu_type", "gpu_count", "cpu_count", "memory_gb", "state", "state_reason"]
    list_filter = ["state", "zone", "gpu_type"]
    search_fields = ["name", "rack"]
