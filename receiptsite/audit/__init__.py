"""The API audit log: one append-only entry for every request a tenant's key makes."""
