"""The run store: run directories, their verification, leases, collection and
divergence. It never trains."""
