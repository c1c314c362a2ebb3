"""Memory plans: what each device and each host holds for a configuration, before any GPU is allocated.

`footprint` describes a model from its folder (config.json and safetensors headers) or from a
preset's parameter count; `plan` turns a config and two footprints into per-device and per-host
byte counts against the cluster's capacities; `report` prints them (`pivot/main.py --dry-run`).
Pure arithmetic over headers and config files: no tensor is read or allocated.
"""
