"""dswiz: DeepSpeed ZeRO made easy to get right.

The package ``wizard`` holds the pure core (hardware report, model spec, memory and throughput model, planner,
config schema/render/check) and the front doors on top of it (CLI, Textual wizard, line prompts).
"""

__version__ = "0.1.0"
