"""The PySpark analytics job over the event archive. Not built yet: see issue 6."""
