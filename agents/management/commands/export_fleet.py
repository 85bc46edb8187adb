import json

from django.core.management.base import BaseCommand

from scheduling.models import Node


class Command(BaseCommand):
    help = "Print the node inventory as an agent --fleet file (virtual nodes for demos and load tests)."

    def add_arguments(self, parser):
        parser.add_argument("--address", default="127.0.0.1", help="the address every virtual node reports")

    def handle(self, *args, address, **options):
        fleet = [
            {
                "name": n.name,
                "zone": n.zone,
                "rack": n.rack,
                "gpu_type": n.gpu_type,
                "gpu_count": n.gpu_count,
                "cpu_count": n.cpu_count,
                "memory_gb": n.memory_gb,
                "scratch_disk_gb": n.scratch_disk_gb,
                "labels": n.labels,
                "address": address,
            }
            for n in Node.objects.order_by("name")
        ]
        self.stdout.write(json.dumps(fleet, indent=1))
