"""The event archive and the PySpark analytics job (README "Analytics"): archiver.py writes the
archive, run.py is the job (extract -> transforms.py -> load), schema.py is their one schema."""
