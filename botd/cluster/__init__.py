"""Several botd nodes on one database: leases (which node does what only one may do)."""
