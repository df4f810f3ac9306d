"""The per-host master process: leases jobs, runs children, renews leases, reports."""
